/** The file names a directory's compose file may have, in Compose's own search order. */
export const COMPOSE_FILE_NAMES: readonly string[] = [
  "compose.yaml",
  "compose.yml",
  "docker-compose.yaml",
  "docker-compose.yml",
];
