// The test Postgres (./helpers/postgres.ts): starts, gives isolated databases,
// and advisory locks work across connections.
import { SQL } from "bun";
import { afterAll, expect, test } from "bun:test";
import { startPostgres } from "./helpers/postgres";

const clients: SQL[] = [];
function connect(url: string): SQL {
  const sql = new SQL({ url, max: 1 });
  clients.push(sql);
  return sql;
}
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close()));
});

test("one server per process; databases are fresh and isolated", async () => {
  const pg = await startPostgres();
  expect(await startPostgres()).toBe(pg);
  const [urlA, urlB] = await Promise.all([pg.createDatabase(), pg.createDatabase()]);
  expect(urlA).not.toBe(urlB);
  expect(urlA).toStartWith(`postgres://postgres@127.0.0.1:${pg.port}/`);

  const a = connect(urlA);
  const b = connect(urlB);
  const [{ version }] = await a`select version()`;
  expect(version).toContain("PostgreSQL");
  const tables = await a`select count(*)::int as n from information_schema.tables where table_schema = 'public'`;
  expect(tables[0].n).toBe(0);

  await a`create table t (id int primary key, name text not null)`;
  await a`insert into t ${a([{ id: 1, name: "one" }, { id: 2, name: "two" }])}`;
  expect(await a`select id, name from t order by id`).toEqual([
    { id: 1, name: "one" },
    { id: 2, name: "two" },
  ]);

  // The other database has no such table; one of the same name there is its own.
  expect(b`select * from t`.then(() => "found")).rejects.toThrow(/does not exist/);
  await b`create table t (id int primary key, name text not null)`;
  await b`insert into t values (7, 'seven')`;
  expect(await b`select id from t`).toEqual([{ id: 7 }]);
  expect(await a`select count(*)::int as n from t`).toEqual([{ n: 2 }]);

  const settings = await a`select name, setting from pg_settings where name in ('fsync', 'max_connections', 'listen_addresses') order by name`;
  expect(settings).toEqual([
    { name: "fsync", setting: "off" },
    { name: "listen_addresses", setting: "127.0.0.1" },
    { name: "max_connections", setting: "200" },
  ]);
});

test("pg_advisory_lock is held across connections", async () => {
  const pg = await startPostgres();
  const url = await pg.createDatabase();
  const one = connect(url);
  const two = connect(url);
  const key = 4242;

  await one`select pg_advisory_lock(${key})`;
  expect(await two`select pg_try_advisory_lock(${key}) as got`).toEqual([{ got: false }]);

  // A blocking lock on the second connection waits until the first lets go.
  let acquired = false;
  const waiting = two`select pg_advisory_lock(${key})`.then(() => {
    acquired = true;
  });
  await Bun.sleep(100);
  expect(acquired).toBe(false);
  expect(await one`select pg_advisory_unlock(${key}) as ok`).toEqual([{ ok: true }]);
  await waiting;
  expect(acquired).toBe(true);
  expect(await one`select pg_try_advisory_lock(${key}) as got`).toEqual([{ got: false }]);
  expect(await two`select pg_advisory_unlock(${key}) as ok`).toEqual([{ ok: true }]);
  expect(await one`select pg_try_advisory_lock(${key}) as got`).toEqual([{ got: true }]);
});
