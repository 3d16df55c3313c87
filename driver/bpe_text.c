/* See bpe_text.h. */
#include "bpe_text.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver.h"

const char *drv_absolute_files(const char *files) {
  const char *out = "";
  for (char *copy = ir_strdup(files), *f; (f = strtok(copy, ",")); copy = NULL) {
    char path[PATH_MAX];
    const char *abs = realpath(f, path) ? path : f;
    out = *out ? ir_fmt("%s,%s", out, abs) : ir_strdup(abs);
  }
  return out;
}

/* PREFIX.tokenizer for PREFIX.bin, else for PREFIX_000012.bin and
 * PREFIX_*.bin with the shard number taken off. */
static FILE *open_beside(const char *data, const char **side) {
  size_t n = strlen(data);
  if (n > 4 && strcmp(data + n - 4, ".bin") == 0) n -= 4;
  *side = ir_fmt("%.*s.tokenizer", (int)n, data);
  FILE *f = fopen(*side, "r");
  size_t k = n;
  while (!f && k > 0 && ((data[k - 1] >= '0' && data[k - 1] <= '9') || data[k - 1] == '*')) k--;
  if (!f && k < n && k > 0 && data[k - 1] == '_') {
    *side = ir_fmt("%.*s.tokenizer", (int)(k - 1), data);
    f = fopen(*side, "r");
  }
  return f;
}

const char *drv_find_tokenizer(const char *data) {
  const char *side;
  FILE *f = open_beside(data, &side);
  if (!f && strpbrk(data, "*?[")) { /* a glob of a folder's shards: the folder's one .tokenizer */
    const char *slash = strrchr(data, '/');
    const char *pattern = slash ? ir_fmt("%.*s/*.tokenizer", (int)(slash - data), data) : "*.tokenizer";
    glob_t g;
    if (glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1) side = ir_strdup(g.gl_pathv[0]), f = fopen(side, "r");
    globfree(&g);
  }
  if (!f) return NULL;
  char line[8192];
  const char *spec = fgets(line, sizeof line, f) ? ir_strdup(strtok(line, "\r\n") ? line : "") : NULL;
  fclose(f);
  if (!spec || !*spec) return NULL;
  /* Relative paths are relative to the folder of the .tokenizer file. */
  const char *slash = strrchr(side, '/'), *out = "";
  for (char *copy = ir_strdup(spec), *p; (p = strtok(copy, ",")); copy = NULL) {
    const char *full = p[0] == '/' || !slash ? p : ir_fmt("%.*s/%s", (int)(slash - side), side, p);
    out = *out ? ir_fmt("%s,%s", out, full) : ir_strdup(full);
  }
  return out;
}

bool drv_sample_tokenizer(const char *files, const char *data, const char *defines, TokBpe **tok) {
  *tok = NULL;
  if (!files && data && *data) files = drv_find_tokenizer(data);
  if (!files) return true;
  if (!(*tok = tok_load(files))) {
    fprintf(stderr, "shardc sample: error: %s\n", tok_error());
    return false;
  }
  const char *vocab = defines ? strstr(defines, "vocab=") : NULL;
  if (vocab && (vocab == defines || vocab[-1] == ' ') && tok_vocab_size(*tok) > atoll(vocab + 6)) {
    fprintf(stderr, "shardc sample: error: %s: the tokenizer has %lld tokens, the model's vocabulary %lld\n",
            files, (long long)tok_vocab_size(*tok), atoll(vocab + 6));
    tok_free(*tok);
    *tok = NULL;
    return false;
  }
  return true;
}

/* The prompt's ids, separated by spaces, or NULL after an error. */
static char *prompt_ids(TokBpe *tok, const char *prompt) {
  TokIds ids = {0};
  if (!tok_encode(tok, (const unsigned char *)prompt, strlen(prompt), 0, &ids)) {
    fprintf(stderr, "shardc sample: error: --prompt: %s\n", tok_error());
    return NULL;
  }
  char *list = ir_alloc(ids.n * 11 + 1), *p = list;
  for (size_t i = 0; i < ids.n; i++) p += sprintf(p, "%s%u", i ? " " : "", ids.ids[i]);
  free(ids.ids);
  return list;
}

int drv_sample_through(TokBpe *tok, const char *program, char **argv, int prompt_at) {
  const char *prompt = argv[prompt_at];
  if (!(argv[prompt_at] = prompt_ids(tok, prompt))) return 1;
  int fd[2];
  if (pipe(fd) != 0) return fprintf(stderr, "shardc sample: error: pipe: %s\n", strerror(errno)), 1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return fprintf(stderr, "shardc sample: error: fork: %s\n", strerror(errno)), 1;
  if (pid == 0) {
    dup2(fd[1], STDOUT_FILENO);
    close(fd[0]), close(fd[1]);
    execv(program, argv);
    fprintf(stderr, "shardc: error: cannot start %s: %s\n", program, strerror(errno));
    _exit(127);
  }
  close(fd[1]);
  fputs(prompt, stdout);
  FILE *in = fdopen(fd[0], "r");
  char line[64];
  bool bad = false;
  while (fgets(line, sizeof line, in)) {
    char *end;
    long long id = strtoll(line, &end, 10);
    size_t len;
    const unsigned char *bytes = end != line ? tok_token_bytes(tok, id, &len) : NULL;
    if (!bytes) {
      bad = true;
      continue;
    }
    fwrite(bytes, 1, len, stdout);
    fflush(stdout);
  }
  fclose(in);
  putchar('\n');
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (bad) fprintf(stderr, "shardc sample: error: the program printed something that is not a token id\n");
  if (WIFEXITED(status)) return bad ? 1 : WEXITSTATUS(status);
  return 1;
}
