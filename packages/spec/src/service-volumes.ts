/**
 * A compose service's volumes, tmpfs mounts and volumes_from: every short and long syntax, the
 * datasets anonymous volumes make, and the rules that keep a bind mount from reaching the host
 * (the engine's socket above all).
 */
import { createHash } from "node:crypto";
import { isValidName, NAME_MAX_LENGTH, type ResolvedService } from "@denv/protocol";
import { projectRelativePath } from "./build-field.ts";
import type { FieldPath } from "./issues.ts";
import { bytes, isRecord, type ServiceContext, scalarString } from "./service-fields.ts";
import { parseBytes } from "./units.ts";

export const DOCKER_SOCKET = /(^|\/)docker\.sock$|^\/var\/run\/docker|^\/run\/docker/;

/**
 * A dataset name for an anonymous volume: `anon-SERVICE-PATH` in the name rule's characters, cut to
 * fit with a short hash of the path when cut or taken, so two paths never share one.
 */
export function anonymousDatasetName(
  service: string,
  target: string,
  taken: (name: string) => boolean,
): string {
  return datasetNameFrom(`anon-${service}`, target, `${service}\0${target}`, taken);
}

/** `PREFIX-PATH` in the name rule's characters, cut and hashed (from `key`) when too long or taken. */
export function datasetNameFrom(
  prefix: string,
  path: string,
  key: string,
  taken: (name: string) => boolean,
): string {
  const slug = path
    .replace(/[^A-Za-z0-9_-]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .replace(/-{2,}/g, "-");
  const plain = `${prefix}-${slug || "root"}`.replace(/\.+/g, "-");
  if (plain.length <= NAME_MAX_LENGTH && isValidName(plain) && !taken(plain)) return plain;
  const hash = createHash("sha256").update(key).digest("hex").slice(0, 8);
  for (let i = 0; ; i++) {
    const suffix = `-${hash}${i ? `-${i}` : ""}`;
    const n = `${plain.slice(0, NAME_MAX_LENGTH - suffix.length).replace(/[-_]+$/, "")}${suffix}`;
    if (!taken(n)) return n;
  }
}

export function volumesField(
  svc: Record<string, unknown>,
  at: (...p: (string | number)[]) => FieldPath,
  serviceName: string,
  ctx: ServiceContext,
): { volumes: ResolvedService["volumes"]; tmpfs: ResolvedService["tmpfs"] } {
  const volumes: ResolvedService["volumes"] = [];
  const tmpfs: ResolvedService["tmpfs"] = [];
  const { issues } = ctx;
  const refuseBind = (source: string, p: FieldPath) => {
    if (DOCKER_SOCKET.test(source))
      issues.error("docker_socket", p, "the Docker socket is the host itself; an environment never gets it");
    else
      issues.error(
        "bind_mount",
        p,
        `bind mount of ${source} refused: the world must not reach the host; declare a named volume under volumes: and use it instead`,
      );
  };
  const named = (
    source: string,
    target: string,
    readOnly: boolean,
    p: FieldPath,
    subpath: string | null,
    nocopy: boolean,
  ) => {
    if (!ctx.declaredVolumes.has(source)) {
      issues.error(
        "volume_undeclared",
        p,
        `volume ${source} is not declared; add it under the top-level volumes:`,
      );
      return;
    }
    if (!target.startsWith("/")) {
      issues.error("invalid_value", p, `volume target ${target} must be an absolute path in the container`);
      return;
    }
    volumes.push({ dataset: source, target, read_only: readOnly, subpath, nocopy });
  };
  // An anonymous volume (a path alone): a dataset of its own, named from the service and the path,
  // which the engine fills from the image's content there as it does any new volume; snapshotted
  // and forked like the rest. Where the file has no dataset map to add to, it stays refused.
  const anonymous = (target: string, readOnly: boolean, p: FieldPath) => {
    if (!target.startsWith("/")) {
      issues.error("invalid_value", p, `volume target ${target} must be an absolute path in the container`);
      return;
    }
    if (!ctx.datasets) {
      issues.error(
        "volume_anonymous",
        p,
        `anonymous volume ${target}: name it and declare it under volumes:`,
      );
      return;
    }
    const name = anonymousDatasetName(serviceName, target, (n) =>
      Boolean(ctx.datasets?.[n] || ctx.declaredVolumes.has(n)),
    );
    ctx.datasets[name] = { labels: { "dev.denv.anonymous": `${serviceName}:${target}` } };
    volumes.push({ dataset: name, target, read_only: readOnly, subpath: null, nocopy: false });
    issues.warn(
      "volume_anonymous",
      p,
      `anonymous volume ${target} became dataset ${name}: filled from the image's ${target}, snapshotted and forked like a named volume`,
    );
  };
  // A relative bind mount of the project's own files: nothing of the host is shared, since the
  // files travel with the project's source. They become a dataset of the version seeded with them
  // at prepare (one per source path, shared by every service that mounts it, as the host path
  // would be), snapshotted and forked like any volume. Outside the project it stays refused.
  const projectFiles = (source: string, target: string, readOnly: boolean, p: FieldPath) => {
    if (DOCKER_SOCKET.test(source)) return refuseBind(source, p);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: a path holding them is refused
    if (/[\x00-\x1f\x7f]/.test(source)) {
      issues.error("bind_mount", p, `bind mount source ${JSON.stringify(source)} holds a control character`);
      return;
    }
    const rel = projectRelativePath(source, "bind mount source");
    if (typeof rel !== "string") return refuseBind(source, p);
    if (!target.startsWith("/")) {
      issues.error("invalid_value", p, `volume target ${target} must be an absolute path in the container`);
      return;
    }
    if (!ctx.datasets) return refuseBind(source, p);
    let name = Object.entries(ctx.datasets).find(([, d]) => d.seed?.source === rel)?.[0];
    if (!name) {
      name = datasetNameFrom("project", rel, `project\0${rel}`, (n) =>
        Boolean(ctx.datasets?.[n] || ctx.declaredVolumes.has(n)),
      );
      ctx.datasets[name] = { labels: { "dev.denv.project-files": rel }, seed: { source: rel } };
    }
    volumes.push({ dataset: name, target, read_only: readOnly, subpath: null, nocopy: false });
    issues.warn(
      "bind_mount_project",
      p,
      `bind mount ${source} became dataset ${name}: the project's ${rel === "." ? "directory" : rel} travels with its source and is mounted ${readOnly ? "read-only" : "writable"} at ${target}, snapshotted and forked like a volume`,
    );
  };
  const list = svc.volumes === undefined ? [] : Array.isArray(svc.volumes) ? svc.volumes : undefined;
  if (!list) issues.error("invalid_value", at("volumes"), "volumes is a list");
  (list ?? []).forEach((entry, i) => {
    const p = at("volumes", i);
    if (typeof entry === "string") {
      const parts = entry.split(":");
      if (parts.length === 1) {
        anonymous(entry, false, p);
        return;
      }
      const [source = "", target = "", mode = ""] = parts;
      if (parts.length > 3) {
        issues.error("invalid_value", p, `"${entry}" is not SOURCE:TARGET[:MODE]`);
        return;
      }
      const modes = mode.split(",").filter(Boolean);
      if (source.startsWith(".")) {
        const bad = modes.filter((m) => !["ro", "rw", "z", "Z"].includes(m));
        if (bad.length) issues.error("invalid_value", p, `unknown bind mount mode ${bad.join(",")}`);
        else projectFiles(source, target, modes.includes("ro"), p);
        return;
      }
      if (/^[./~]/.test(source) || source.includes("/")) {
        refuseBind(source, p);
        return;
      }
      const bad = modes.filter((m) => !["ro", "rw", "z", "Z", "nocopy"].includes(m));
      if (bad.length) {
        issues.error("invalid_value", p, `unknown volume mode ${bad.join(",")}`);
        return;
      }
      named(source, target, modes.includes("ro"), p, null, modes.includes("nocopy"));
    } else if (isRecord(entry)) {
      const type = entry.type ?? "volume";
      const source = scalarString(entry.source) ?? "";
      const target = scalarString(entry.target) ?? "";
      if (type === "bind" && source && !/^[/~]/.test(source) && !/^[a-zA-Z]:[\\/]/.test(source)) {
        projectFiles(source, target, entry.read_only === true, p);
        return;
      }
      if (type === "bind" || type === "npipe") {
        refuseBind(source || target, p);
        return;
      }
      if (type === "tmpfs") {
        const t = isRecord(entry.tmpfs) ? entry.tmpfs : {};
        tmpfs.push({
          target,
          size_bytes: t.size === undefined ? null : (bytes(t.size, [...p, "tmpfs", "size"], issues) ?? null),
          mode:
            Number.isInteger(t.mode) && (t.mode as number) >= 0 && (t.mode as number) <= 0o7777
              ? (t.mode as number)
              : null,
        });
        return;
      }
      if (type === "image") {
        issues.error(
          "unsupported_field",
          [...p, "type"],
          "image volumes are not available; copy the files into the service's image",
        );
        return;
      }
      if (type !== "volume") {
        issues.error(
          "invalid_value",
          [...p, "type"],
          `volume type ${String(type)} must be volume, tmpfs or bind`,
        );
        return;
      }
      if (!source) {
        anonymous(target, entry.read_only === true, p);
        return;
      }
      const v = isRecord(entry.volume) ? entry.volume : {};
      named(
        source,
        target,
        entry.read_only === true,
        p,
        typeof v.subpath === "string" ? v.subpath : null,
        v.nocopy === true,
      );
    } else
      issues.error(
        "invalid_value",
        p,
        "a volume is SOURCE:TARGET[:MODE] or a mapping with type/source/target",
      );
  });
  // A config is its project file mounted read-only, at /NAME unless it says where (as Compose
  // mounts one without a swarm; like Compose then, uid, gid and mode are not applied).
  const configs = svc.configs === undefined ? [] : Array.isArray(svc.configs) ? svc.configs : undefined;
  if (!configs) issues.error("invalid_value", at("configs"), "configs is a list");
  (configs ?? []).forEach((entry, i) => {
    const p = at("configs", i);
    const name = isRecord(entry) ? scalarString(entry.source) : scalarString(entry);
    const file = name === undefined ? undefined : ctx.configFiles?.get(name);
    if (name === undefined || file === undefined) {
      issues.error(
        "secret_undeclared",
        p,
        `config ${name ?? JSON.stringify(entry)} is not declared under the top-level configs:`,
      );
      return;
    }
    const target = (isRecord(entry) ? scalarString(entry.target) : undefined) ?? `/${name}`;
    if (isRecord(entry) && ["uid", "gid", "mode"].some((k) => entry[k] !== undefined))
      issues.warn(
        "ignored_field",
        p,
        `config ${name}: uid, gid and mode are not applied to a config outside a swarm (Compose does not either)`,
      );
    projectFiles(
      file.startsWith(".") ? file : `./${file}`,
      target.startsWith("/") ? target : `/${target}`,
      true,
      p,
    );
  });
  if (svc.tmpfs !== undefined) {
    const entries = Array.isArray(svc.tmpfs) ? svc.tmpfs : [svc.tmpfs];
    entries.forEach((e, i) => {
      const s = scalarString(e) ?? "";
      const [target = "", opts = ""] = s.split(/:(.*)/);
      if (!target.startsWith("/")) {
        issues.error("invalid_value", at("tmpfs", i), "tmpfs entries are absolute paths");
        return;
      }
      let size: number | null = null;
      let mode: number | null = null;
      for (const o of opts.split(",").filter(Boolean)) {
        const [k, val = ""] = o.split("=");
        if (k === "size") size = parseBytes(val) ?? null;
        else if (k === "mode") mode = Number.parseInt(val, 8);
      }
      tmpfs.push({ target, size_bytes: size, mode: Number.isNaN(mode) ? null : mode });
    });
  }
  return { volumes, tmpfs };
}

export function volumesFromField(v: unknown, path: FieldPath, ctx: ServiceContext): string[] {
  if (v === undefined || v === null) return [];
  const out: string[] = [];
  (Array.isArray(v) ? v : [v]).forEach((e, i) => {
    const s = scalarString(e) ?? "";
    if (s.startsWith("container:")) {
      ctx.issues.error(
        "volumes_from_outside",
        [...path, i],
        `volumes_from ${s} reaches a container outside the stack`,
      );
      return;
    }
    const name = s.split(":")[0] ?? "";
    if (!ctx.serviceNames.has(name)) {
      ctx.issues.error(
        "volumes_from_outside",
        [...path, i],
        `volumes_from names ${name}, which is not a service of this file`,
      );
      return;
    }
    out.push(s);
  });
  return out;
}
