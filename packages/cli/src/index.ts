export { main } from "./main.ts";
export { buildProgram, CLI_VERSION } from "./program.ts";
