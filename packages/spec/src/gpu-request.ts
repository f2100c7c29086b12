/**
 * A service's GPUs, from either of Compose's forms: `deploy.resources.reservations.devices` (the
 * long form: `capabilities` required, `count` or `device_ids` but not both, `count` absent meaning
 * all) and the service-level `gpus:` (`all`, or a list of the same fields with `capabilities: [gpu]`
 * implied). Both resolve to one request per service, so placement counts GPUs one way and the host
 * renders them one way (the Engine API's DeviceRequests, or CDI device names).
 */
import type { ResolvedService } from "@denv/protocol";
import type { FieldPath } from "./issues.ts";
import type { IssueList } from "./load-compose.ts";

export type GpuRequest = NonNullable<ResolvedService["gpus"]>;

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** An index or a UUID as nvidia-smi prints them (GPU-…, MIG-…). */
const DEVICE_ID = /^[A-Za-z0-9][A-Za-z0-9:._/-]{0,127}$/;
/** At most this many GPUs asked for by count: more than any one machine holds. */
const MAX_COUNT = 64;

export function gpuField(
  svc: Record<string, unknown>,
  at: (...p: (string | number)[]) => FieldPath,
  issues: IssueList,
): GpuRequest | undefined {
  const reservations =
    isRecord(svc.deploy) && isRecord(svc.deploy.resources) && isRecord(svc.deploy.resources.reservations)
      ? svc.deploy.resources.reservations
      : undefined;
  const long = reservations?.devices;
  if (long !== undefined && svc.gpus !== undefined) {
    issues.error(
      "conflicting_values",
      at("gpus"),
      "gpus and deploy.resources.reservations.devices both ask for devices: give one",
    );
    return undefined;
  }
  if (long !== undefined) {
    const where = (...p: (string | number)[]) => at("deploy", "resources", "reservations", "devices", ...p);
    if (!Array.isArray(long) || long.length === 0) {
      issues.error("invalid_value", where(), "devices is a list of device requests");
      return undefined;
    }
    if (long.length > 1) {
      issues.error(
        "unsupported_field",
        where(1),
        "one device request per service: ask for the GPUs it needs in one entry",
      );
      return undefined;
    }
    return deviceRequest(long[0], where(0), (...p) => where(0, ...p), issues, false);
  }
  if (svc.gpus === undefined) return undefined;
  if (svc.gpus === "all")
    return { driver: "nvidia", count: "all", device_ids: null, capabilities: ["gpu"], options: {} };
  if (!Array.isArray(svc.gpus) || svc.gpus.length === 0) {
    issues.error("invalid_value", at("gpus"), 'gpus is "all" or a list of device requests');
    return undefined;
  }
  if (svc.gpus.length > 1) {
    issues.error(
      "unsupported_field",
      at("gpus", 1),
      "one device request per service: ask for the GPUs it needs in one entry",
    );
    return undefined;
  }
  return deviceRequest(svc.gpus[0], at("gpus", 0), (...p) => at("gpus", 0, ...p), issues, true);
}

function deviceRequest(
  entry: unknown,
  path: FieldPath,
  at: (...p: (string | number)[]) => FieldPath,
  issues: IssueList,
  gpusForm: boolean,
): GpuRequest | undefined {
  if (!isRecord(entry)) {
    issues.error(
      "invalid_value",
      path,
      "a device request is a mapping (driver, count or device_ids, capabilities)",
    );
    return undefined;
  }
  const before = issues.errorCount;
  for (const key of Object.keys(entry))
    if (!["driver", "count", "device_ids", "capabilities", "options"].includes(key))
      issues.error("unsupported_field", at(key), `${key} is not a field of a device request`);
  // Capabilities: required in the long form (Compose refuses a request without them), [gpu] in gpus:.
  let capabilities: string[] = ["gpu"];
  if (entry.capabilities === undefined) {
    if (!gpusForm)
      issues.error(
        "invalid_value",
        at("capabilities"),
        "capabilities is required in a device request (e.g. [gpu])",
      );
  } else if (
    !Array.isArray(entry.capabilities) ||
    entry.capabilities.length === 0 ||
    !entry.capabilities.every((c) => typeof c === "string" && /^[a-z0-9_.-]{1,64}$/.test(c))
  ) {
    issues.error(
      "invalid_value",
      at("capabilities"),
      "capabilities is a list of names (gpu, compute, utility, ...)",
    );
  } else {
    capabilities = [...new Set(entry.capabilities as string[])];
    if (!capabilities.includes("gpu"))
      issues.error(
        "unsupported_field",
        at("capabilities"),
        `a device request for ${capabilities.join(", ")} without gpu: denv passes GPUs through, no other devices`,
      );
  }
  const driver = entry.driver === undefined ? "nvidia" : String(entry.driver);
  if (driver !== "nvidia")
    issues.error(
      "unsupported_field",
      at("driver"),
      `driver ${driver}: denv passes NVIDIA GPUs through (driver nvidia)`,
    );
  if (entry.count !== undefined && entry.device_ids !== undefined)
    issues.error("conflicting_values", at("device_ids"), "count and device_ids cannot both be set: give one");
  let count: GpuRequest["count"] = null;
  if (entry.count !== undefined) {
    const n =
      typeof entry.count === "string" && /^\d+$/.test(entry.count) ? Number(entry.count) : entry.count;
    if (n === "all" || n === -1) count = "all";
    else if (typeof n === "number" && Number.isInteger(n) && n >= 1 && n <= MAX_COUNT) count = n;
    else issues.error("invalid_value", at("count"), `count is all or a whole number from 1 to ${MAX_COUNT}`);
  }
  let deviceIds: string[] | null = null;
  if (entry.device_ids !== undefined) {
    if (
      !Array.isArray(entry.device_ids) ||
      entry.device_ids.length === 0 ||
      entry.device_ids.length > MAX_COUNT ||
      !entry.device_ids.every(
        (d) => (typeof d === "string" || typeof d === "number") && DEVICE_ID.test(String(d)),
      )
    )
      issues.error(
        "invalid_value",
        at("device_ids"),
        "device_ids is a list of GPU indexes or UUIDs as nvidia-smi prints them",
      );
    else deviceIds = [...new Set(entry.device_ids.map(String))];
  }
  // Neither: Compose gives the service every GPU.
  if (count === null && deviceIds === null && entry.count === undefined && entry.device_ids === undefined)
    count = "all";
  const options: Record<string, string> = {};
  if (entry.options !== undefined) {
    if (!isRecord(entry.options))
      issues.error("invalid_value", at("options"), "options is a mapping of driver options");
    else for (const [k, v] of Object.entries(entry.options)) options[k] = String(v);
  }
  if (issues.errorCount > before) return undefined;
  return { driver, count, device_ids: deviceIds, capabilities, options };
}

/** How many GPUs a request holds on a host with `available` of them: all of them for `all`. */
export function gpusWanted(r: GpuRequest, available: number): number {
  if (r.device_ids) return r.device_ids.length;
  return r.count === "all" ? available : (r.count ?? available);
}
