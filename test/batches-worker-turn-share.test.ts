// A Worker that runs a shard and a validation at once (src/batches/pool.ts)
// waits for one turn at the CPU, not two: the two wait together, the
// Worker's cells count one waiter, and the turn it gets is one turn
// (src/batches/worker/turns.ts). Counted twice, a waiter would stay counted
// for good (every later hand-over would collect a heap for nobody), and the
// second take would hold a turn its cells do not show: never given back.
import { expect, test } from "bun:test";
import { FREE, HOLDING, WAITERS, WAITING, newTurnHolder, newTurns } from "../src/batches/turns";
import { giveTurn, holdsTurn, initTurns, takeTurn } from "../src/batches/worker/turns";
import { sleep } from "./helpers/batches";

test("two tasks of one Worker waiting for a turn: one waiter, one turn, given back once", async () => {
  const turns = newTurns(1);
  const mine = newTurnHolder();
  initTurns(turns, mine);
  // Another Worker holds the only turn.
  Atomics.store(turns, FREE, 0);
  const shard = takeTurn();
  const validation = takeTurn();
  expect(shard).not.toBeNull();
  expect(validation).not.toBeNull();
  await sleep(20);
  expect({ waiters: Atomics.load(turns, WAITERS), waiting: Atomics.load(mine, WAITING) }).toEqual({ waiters: 1, waiting: 1 });
  // It gives its turn back: both tasks go on, on the one turn.
  Atomics.store(turns, FREE, 1);
  Atomics.notify(turns, FREE);
  await Promise.all([shard, validation]);
  expect({ holds: holdsTurn(), free: Atomics.load(turns, FREE), waiters: Atomics.load(turns, WAITERS), holding: Atomics.load(mine, HOLDING) }).toEqual({ holds: true, free: 0, waiters: 0, holding: 1 });
  giveTurn();
  giveTurn();
  expect({ holds: holdsTurn(), free: Atomics.load(turns, FREE), holding: Atomics.load(mine, HOLDING) }).toEqual({ holds: false, free: 1, holding: 0 });
});
