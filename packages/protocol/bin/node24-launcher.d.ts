// Types of node24-launcher.js (plain JavaScript, so that it starts on an older node).
export function launch(command: string, mainUrl: string): Promise<void>;
export function longRunning(command: string, args: string[]): boolean;
export function missingFlags(
  command: string,
  args: string[],
  execArgv: string[],
  nodeOptions?: string,
): string[];
