/**
 * The exec agents of this host's containers: the sockets denvd listens on for them (one per
 * container, see exec/agent-channel.ts), how exec reaches each, and the user each container's
 * commands run as when none is asked for. Registered once per container, whether it was just
 * started or found running again after a denvd restart.
 */
import type { ResolvedService } from "@denv/protocol";
import { AgentChannel } from "../exec/agent-channel.ts";
import type { AgentTarget } from "../exec/agent-executor.ts";
import type { StackRecord } from "../host/state-store.ts";
import type { ContainerRuntime } from "../runtime/container-runtime.ts";
import { type ServiceIdentity, serviceIdentity } from "./container-spec.ts";

export class AgentRegistry {
  private readonly channel: AgentChannel;
  private readonly runtime: ContainerRuntime;
  private readonly targets = new Map<string, AgentTarget>();
  private readonly users = new Map<string, string | null>();

  constructor(stateDir: string, runtime: ContainerRuntime) {
    this.channel = new AgentChannel(stateDir);
    this.runtime = runtime;
  }

  /** Listens for a service's agent; returns the host directory its container mounts at /.denv/run. */
  async listen(stackId: string, service: string): Promise<string> {
    return this.channel.listen(AgentChannel.keyOf(stackId, service));
  }

  /** Lets go of a service's agent while its processes are checkpointed (AgentChannel.detach). */
  async detach(stackId: string, service: string): Promise<boolean> {
    return this.channel.detach(AgentChannel.keyOf(stackId, service));
  }

  /** Who the service runs as and what it runs (its image asked through the engine). */
  async identityOf(service: string, s: ResolvedService): Promise<ServiceIdentity> {
    return serviceIdentity(service, s, await this.runtime.imageConfig(s.image_pinned ?? s.image));
  }

  /** How exec reaches a container's agent, and the user its commands run as by default. */
  register(
    stack: Pick<StackRecord, "id">,
    service: string,
    containerId: string,
    identity: ServiceIdentity,
  ): void {
    const key = AgentChannel.keyOf(stack.id, service);
    // Commands run as the container's own user, as `docker exec` does: the service's `user:`, else
    // the image's USER (an image that says USER 1000 never gets root by default).
    this.users.set(containerId, identity.user ?? null);
    this.targets.set(containerId, {
      dial: () => this.channel.dial(key),
      defaultUser: identity.user ?? null,
      homeSet: identity.homeSet,
      version: () => this.channel.version(key),
    });
  }

  target(containerId: string): AgentTarget | null {
    return this.targets.get(containerId) ?? null;
  }

  /** The user a container's commands run as when none is asked for (undefined: the engine's). */
  defaultUser(containerId: string): string | null | undefined {
    return this.users.get(containerId);
  }

  /** Waits up to timeoutMs for a service's agent to dial in. */
  waitConnected(stackId: string, service: string, timeoutMs: number): Promise<boolean> {
    return this.channel.waitConnected(AgentChannel.keyOf(stackId, service), timeoutMs);
  }

  /** Forgets a stack's containers and stops listening for their agents. */
  async forget(stack: Pick<StackRecord, "id" | "containers" | "spec">): Promise<void> {
    for (const id of Object.values(stack.containers)) {
      this.targets.delete(id);
      this.users.delete(id);
    }
    for (const svc of Object.keys(stack.spec.services))
      await this.channel.close(AgentChannel.keyOf(stack.id, svc));
  }

  async close(): Promise<void> {
    await this.channel.closeAll();
  }
}
