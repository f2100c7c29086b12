/**
 * The worker side of ComposeValidator: validates one compose file per message, in a thread whose
 * heap is capped, so a hostile file costs the control plane neither its event loop nor its memory.
 */
import { parentPort } from "node:worker_threads";
import { type ValidateOptions, validateCompose } from "./validate-compose.ts";

export interface ValidateRequest {
  id: number;
  text: string;
  options: Omit<ValidateOptions, "readFile">;
}

parentPort?.on("message", (req: ValidateRequest) => {
  try {
    parentPort?.postMessage({ id: req.id, result: validateCompose(req.text, req.options) });
  } catch (err) {
    parentPort?.postMessage({ id: req.id, error: (err as Error).message });
  }
});
