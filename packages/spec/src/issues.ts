/**
 * What validation says about a compose file: refusals (severity "error") and warnings, each with a
 * stable code from RULE_CODES, a message that says what to do, the field path
 * (e.g. `services.opsbox.user`) and its line:column in the file (1-based; 0 when the position is
 * unknown, as for a value that comes from an interpolated default).
 */
export const RULE_CODES = [
  // the file itself
  "file_too_large",
  "yaml_syntax",
  "yaml_alias_bomb",
  "yaml_duplicate_key",
  "not_a_mapping",
  "compose_too_complex",
  "too_many_issues",
  "interpolation_required",
  "interpolation_syntax",
  "interpolation_unset",
  // compose syntax
  "no_services",
  "unsupported_field",
  "ignored_field",
  "obsolete_version",
  "invalid_value",
  "name_invalid",
  "conflicting_values",
  "service_unknown",
  "depends_on_cycle",
  "profile_inactive",
  // the world must not reach the host
  "network_mode_host",
  "network_external",
  "network_undeclared",
  "network_driver",
  "namespace_host",
  "sysctl_refused",
  "privileged",
  "cap_add",
  "devices",
  "security_opt_unconfined",
  "bind_mount",
  "docker_socket",
  "volume_undeclared",
  "volume_external",
  "volume_driver",
  "volume_anonymous",
  "bind_mount_project",
  "port_not_published",
  "volumes_from_outside",
  "build_without_image",
  "secret_host",
  "secret_undeclared",
  // x-denv
  "x_denv_invalid",
  "agent_missing",
  "agent_root",
  "agent_user_unset",
  "verifier_invalid",
  "collect_path_invalid",
  // Raised by the control plane at resolve, from what an earlier start read of the same image.
  "clock_not_frozen",
] as const;

export type RuleCode = (typeof RULE_CODES)[number];

export type Severity = "error" | "warning";

export interface SpecIssue {
  code: RuleCode;
  severity: Severity;
  message: string;
  path: string;
  line: number;
  column: number;
}

/** A path as an array of keys, joined with dots for people: services.opsbox.volumes[0]. */
export type FieldPath = readonly (string | number)[];

export function formatPath(path: FieldPath): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else if (/^[A-Za-z0-9_-]+$/.test(part)) out += out ? `.${part}` : part;
    else out += `[${JSON.stringify(part)}]`;
  }
  return out;
}
