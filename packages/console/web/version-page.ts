/** A version: its pinned images, its data sheet, its warm pool, and a fork made from it. */
import { ApiError, api } from "./console-api.ts";
import { evidenceView } from "./deployment-page.ts";
import { age, confirmDialog, crumbs, errorBox, h, show } from "./dom.ts";

type Go = (hash: string) => void;

export async function versionPage(main: HTMLElement, id: string, go: Go): Promise<void> {
  const [version, sheet, pool] = await Promise.all([
    api.versions.get(id),
    api.versions.datasheet(id),
    // A version without a pool answers 404: that is "no pool", not an error of the page.
    api.pools.get(id).catch((err) => {
      if (err instanceof ApiError && err.status === 404) return null;
      throw err;
    }),
  ]);
  const status = h("div", { "aria-live": "polite" });
  show(
    main,
    crumbs(version.id, version.environment_id),
    h("h1", {}, "Version ", h("code", {}, version.id)),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "made"),
      h("dd", {}, age(version.created_at)),
      h("dt", {}, "spec"),
      h("dd", {}, h("code", { class: "digest" }, version.spec_hash)),
      h("dt", {}, "images"),
      h(
        "dd",
        {},
        h(
          "ul",
          { class: "ev-list" },
          Object.entries(version.images).map(([svc, ref]) =>
            h("li", {}, `${svc}: `, h("code", { class: "digest" }, ref)),
          ),
        ),
      ),
      h("dt", {}, "warm pool"),
      h(
        "dd",
        {},
        pool
          ? `${pool.ready} ready of ${pool.size}, ${pool.warming} warming; ${pool.hits} hits, ${pool.misses} misses`
          : "none",
      ),
    ),
    h(
      "div",
      { class: "actions" },
      h(
        "button",
        {
          id: "act-fork-version",
          onclick: async () => {
            if (
              !(await confirmDialog(
                "Fork this version?",
                "A new sandbox environment from this version's images and volumes.",
                "Fork",
              ))
            )
              return;
            try {
              const env = await api.sandboxes.create({
                from_version: version.id,
              });
              go(env.deployment_id ? `#/deployment/${env.deployment_id}` : `#/env/${env.id}`);
            } catch (err) {
              show(status, errorBox(err));
            }
          },
        },
        "Fork",
      ),
      status,
    ),
    h("h2", {}, "Data sheet"),
    evidenceView(sheet),
  );
}
