export { buildConsole, CONSOLE_DIST, type ConsoleAssets, consoleAssets } from "./console-assets.ts";
