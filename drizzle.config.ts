import { defineConfig } from "drizzle-kit";

// SQLite (the default database). Postgres: drizzle.pg.config.ts.
export default defineConfig({
  dialect: "sqlite",
  schema: "./src/db/schema/sqlite/index.ts",
  out: "./drizzle",
});
