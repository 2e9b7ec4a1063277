export * from "./apiKeys";
export * from "./files";
export * from "./fileParts";
export * from "./batches";
export * from "./batchShards";
export * from "./chats";
export * from "./webhooks";
export * from "./nodes";
