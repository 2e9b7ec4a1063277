import { defineConfig } from "drizzle-kit";

// Postgres (clusters, SPEC §14). Same tables as drizzle.config.ts.
export default defineConfig({
  dialect: "postgresql",
  schema: "./src/db/schema/pg/index.ts",
  out: "./drizzle-pg",
});
