/*
 * Users and groups, resolved inside the container from its own /etc/passwd and /etc/group (read as
 * regular files of at most 1 MiB, never blocking), and the switch to them.
 */
#include "denv-agent.h"

static int all_digits(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* Splits one passwd/group line into up to n ':'-separated fields (in place). */
static int split_fields(char *line, char **fields, int n) {
  int k = 0;
  fields[k++] = line;
  for (char *p = line; *p && k < n; p++)
    if (*p == ':') {
      *p = 0;
      fields[k++] = p + 1;
    }
  return k;
}


/* Finds a passwd entry by name or uid; fills name, uid, gid, home. */
static int passwd_lookup(const char *name, long uid, struct ids *out) {
  char *text = read_small_file("/etc/passwd");
  if (!text) return 0;
  int found = 0;
  char *lines = NULL;
  for (char *line = strtok_r(text, "\n", &lines); line && !found; line = strtok_r(NULL, "\n", &lines)) {
    char *f[7];
    if (split_fields(line, f, 7) < 7) continue;
    if (name ? strcmp(f[0], name) != 0 : (!all_digits(f[2]) || atol(f[2]) != uid)) continue;
    if (!all_digits(f[2]) || !all_digits(f[3])) continue;
    out->uid = (uid_t)atol(f[2]);
    out->gid = (gid_t)atol(f[3]);
    snprintf(out->home, sizeof out->home, "%s", f[5]);
    snprintf(out->name, sizeof out->name, "%s", f[0]);
    out->have_entry = 1;
    found = 1;
  }
  free(text);
  return found;
}

/* A group's gid by name; -1 when there is none. */
static long group_gid(const char *name) {
  char *text = read_small_file("/etc/group");
  if (!text) return -1;
  long gid = -1;
  char *lines = NULL;
  for (char *line = strtok_r(text, "\n", &lines); line && gid < 0; line = strtok_r(NULL, "\n", &lines)) {
    char *f[4];
    if (split_fields(line, f, 4) < 3) continue;
    if (strcmp(f[0], name) == 0 && all_digits(f[2])) gid = atol(f[2]);
  }
  free(text);
  return gid;
}

/* A group's name by gid, into buf ("" when there is none). */
void group_name_of(gid_t gid, char *buf, size_t len) {
  buf[0] = 0;
  char *text = read_small_file("/etc/group");
  if (!text) return;
  char *lines = NULL;
  for (char *line = strtok_r(text, "\n", &lines); line && !buf[0]; line = strtok_r(NULL, "\n", &lines)) {
    char *f[4];
    if (split_fields(line, f, 4) < 3) continue;
    if (all_digits(f[2]) && (gid_t)atol(f[2]) == gid) snprintf(buf, len, "%s", f[0]);
  }
  free(text);
}

/* Supplementary groups: every group that lists the user as a member. */
static void member_groups(struct ids *out) {
  out->ngroups = 0;
  out->groups[out->ngroups++] = out->gid;
  if (!out->name[0]) return;
  char *text = read_small_file("/etc/group");
  if (!text) return;
  char *lines = NULL;
  for (char *line = strtok_r(text, "\n", &lines); line; line = strtok_r(NULL, "\n", &lines)) {
    char *f[4];
    if (split_fields(line, f, 4) < 4 || !all_digits(f[2])) continue;
    char *members = NULL;
    for (char *m = strtok_r(f[3], ",", &members); m; m = strtok_r(NULL, ",", &members)) {
      if (strcmp(m, out->name) == 0 && out->ngroups < MAX_GROUPS) {
        out->groups[out->ngroups++] = (gid_t)atol(f[2]);
        break;
      }
    }
  }
  free(text);
}

/* "name|uid[:group|gid]" -> ids, as `docker exec -u` resolves it. Writes a message on failure. */
int resolve_user(const char *spec, struct ids *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char user[512];
  snprintf(user, sizeof user, "%s", spec);
  char *group = strchr(user, ':');
  if (group) *group++ = 0;
  if (all_digits(user)) {
    out->uid = (uid_t)atol(user);
    if (!passwd_lookup(NULL, atol(user), out)) {
      out->uid = (uid_t)atol(user);
      out->gid = out->uid;
    }
  } else if (!passwd_lookup(user, 0, out)) {
    /* Docker's wording, which frameworks built on `docker exec` look for. */
    snprintf(err, errlen, "unable to find user %s: no matching entries in passwd file\n", user);
    return -1;
  }
  if (group) {
    if (all_digits(group)) out->gid = (gid_t)atol(group);
    else {
      long gid = group_gid(group);
      if (gid < 0) {
        snprintf(err, errlen, "unable to find group %s: no matching entries in group file\n", group);
        return -1;
      }
      out->gid = (gid_t)gid;
    }
  }
  member_groups(out);
  return 0;
}

int drop_to(const struct ids *ids) {
  if (setgroups((size_t)ids->ngroups, ids->groups) || setgid(ids->gid) || setuid(ids->uid)) return -1;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * exec */

/*
 * The command's environment: the agent's own (the container's), with the request's on top. With
 * `home` (the container sets no HOME, or the command runs as another user than the service's),
 * HOME is the user's from passwd; with `name`, USER and LOGNAME are that user's name, as a login
 * would set them. The request's own variables override all three. With `clean` (graders), the
 * container's variables are left out: the command starts from the request's alone.
 */
char **merge_env(char **extra, uint32_t n, const char *home, const char *name, int clean) {
  size_t base = 0;
  while (!clean && environ[base]) base++;
  char **env = calloc(base + n + 4, sizeof(char *));
  size_t k = 0;
  for (size_t i = 0; i < base; i++) {
    int overridden = 0;
    size_t klen = strcspn(environ[i], "=");
    for (uint32_t j = 0; j < n; j++)
      if (strncmp(extra[j], environ[i], klen) == 0 && extra[j][klen] == '=') overridden = 1;
    if (home && strncmp(environ[i], "HOME=", 5) == 0) overridden = 1;
    if (name && (strncmp(environ[i], "USER=", 5) == 0 || strncmp(environ[i], "LOGNAME=", 8) == 0)) overridden = 1;
    if (!overridden) env[k++] = environ[i];
  }
  for (uint32_t j = 0; j < n; j++) env[k++] = extra[j];
  const char *keys[3] = {"HOME", "USER", "LOGNAME"};
  const char *values[3] = {home, name, name};
  for (int v = 0; v < 3; v++) {
    if (!values[v]) continue;
    size_t klen = strlen(keys[v]);
    int present = 0;
    for (size_t i = 0; i < k; i++)
      if (strncmp(env[i], keys[v], klen) == 0 && env[i][klen] == '=') present = 1;
    if (present) continue;
    char *e = malloc(klen + strlen(values[v]) + 2);
    sprintf(e, "%s=%s", keys[v], values[v]);
    env[k++] = e;
  }
  env[k] = NULL;
  return env;
}
