export { type ClientOptions, DenvApiError, DenvClient, OPERATIONS, type Operations } from "./client.ts";
export type * from "./schema.gen.ts";
