export * from "./apiKeys";
export * from "./files";
