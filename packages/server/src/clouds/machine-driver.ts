/**
 * What the provision phase needs of a cloud that makes machines (provisioner.ts): create one with
 * cloud-init user data and labels, delete it, list what carries a label. Hetzner's REST API
 * (hetzner-driver.ts) and Amazon EC2 (aws-driver.ts) implement it.
 */

export interface CloudServer {
  /** The provider's id: Hetzner's a number, EC2's an instance id (`i-…`). */
  id: number | string;
  name: string;
  status: string;
  labels: Record<string, string>;
  /** The image it was made from, where the driver chose it (EC2: the newest Debian 12 image). */
  image?: string;
}

export interface MachineDriver {
  createServer(o: {
    name: string;
    serverType: string;
    location: string;
    /** The provider's name for the image where it has one (Hetzner's `debian-12`); EC2 finds its own. */
    image: string;
    userData: string;
    labels: Record<string, string>;
  }): Promise<CloudServer>;
  /** Idempotent: a machine already gone is not an error. */
  deleteServer(id: number | string): Promise<void>;
  /** Machines carrying a label (`key` or `key=value`); also proves the credentials work. */
  listServers(label: string): Promise<CloudServer[]>;
}
