/**
 * `denv login` without a key: the CLI asks for a device code and polls it; a person signed in to
 * the console looks the short user code up and approves (or denies) it; the poll after an approval
 * gets a new API key of that person's team, named after the machine (device-store.ts).
 */
import { DenvError } from "@denv/protocol";
import {
  answerDevice,
  createDeviceCode,
  DEVICE_CODE_TTL_MS,
  DEVICE_POLL_INTERVAL_MS,
  pendingDevice,
  pollDevice,
} from "../store/device-store.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { takeAnonymousTurn } from "./people-routes.ts";
import {
  deviceAnswerBody,
  deviceCodeBody,
  deviceCodeCreated,
  devicePending,
  deviceToken,
  deviceTokenBody,
} from "./people-schemas.ts";
import { ANONYMOUS_JSON_LIMIT_BYTES } from "./request-bodies.ts";

export const deviceRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/device/code",
    name: "device.start",
    summary: "Start a device login: a device code to poll with and a user code to approve in the console",
    body: deviceCodeBody,
    response: deviceCodeCreated,
    status: 201,
    auth: false,
    bodyLimitBytes: ANONYMOUS_JSON_LIMIT_BYTES,
    handler: async (c, { body }) => {
      takeAnonymousTurn(c, "device");
      const d = await createDeviceCode(c.var.deps.store, body.client_name);
      const origin = new URL(c.req.url).origin;
      return c.json(
        {
          device_code: d.deviceCode,
          user_code: d.userCode,
          verification_uri: `${origin}/device`,
          verification_uri_complete: `${origin}/device?code=${d.userCode}`,
          expires_in: DEVICE_CODE_TTL_MS / 1000,
          interval: DEVICE_POLL_INTERVAL_MS / 1000,
        },
        201,
      );
    },
  }),
  route({
    method: "post",
    path: "/v1/device/token",
    name: "device.poll",
    summary: "Poll a device login: pending until a person answers; once approved, a new API key (once)",
    body: deviceTokenBody,
    response: deviceToken,
    auth: false,
    bodyLimitBytes: ANONYMOUS_JSON_LIMIT_BYTES,
    handler: async (c, { body }) => {
      takeAnonymousTurn(c, "device-poll");
      const r = await pollDevice(c.var.deps.store, body.device_code);
      if (r.state !== "approved")
        return c.json({ status: r.state, interval: DEVICE_POLL_INTERVAL_MS / 1000 });
      return c.json({
        status: "approved",
        api_key: r.apiKey,
        key_id: r.keyId,
        team_id: r.teamId,
        role: r.role,
      });
    },
  }),
  route({
    method: "get",
    path: "/v1/device/{code}",
    name: "device.get",
    summary: "A pending device login by its user code, for the person about to answer it",
    response: devicePending,
    auth: true,
    handler: async (c) => {
      if (!c.var.sessionId)
        throw new DenvError("forbidden", "approve device logins signed in to the console");
      // A user code is short (34 bits): looking codes up is held to a person's pace.
      takeAnonymousTurn(c, "device-lookup", c.var.userId ?? undefined);
      const d = await pendingDevice(c.var.deps.store, c.req.param("code") ?? "");
      return c.json({
        user_code: d.user_code,
        client_name: d.client_name,
        created_at: d.created_at,
        expires_at: d.expires_at,
      });
    },
  }),
  route({
    method: "post",
    path: "/v1/device/{code}",
    name: "device.answer",
    summary: "Approve or deny a device login: approved, it gets a key of this team with this person's role",
    body: deviceAnswerBody,
    response: devicePending.extend({ approved: deviceAnswerBody.shape.approve }),
    auth: true,
    needs: "read",
    handler: async (c, { body }) => {
      const { userId, sessionId } = c.var;
      if (!userId || !sessionId)
        throw new DenvError("forbidden", "approve device logins signed in to the console");
      // A user code is short (34 bits): looking codes up is held to a person's pace.
      takeAnonymousTurn(c, "device-lookup", userId);
      const code = c.req.param("code") ?? "";
      const d = await pendingDevice(c.var.deps.store, code);
      await answerDevice(c.var.deps.store, code, { userId, teamId: c.var.teamId }, body.approve);
      return c.json({
        user_code: d.user_code,
        client_name: d.client_name,
        created_at: d.created_at,
        expires_at: d.expires_at,
        approved: body.approve,
      });
    },
  }),
];
