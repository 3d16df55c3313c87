/* Fuzzing the token-shard reader (runtime/data.c, llm.c's format): the
 * bytes as one shard, opened for a small and a large vocabulary, then
 * windows read in order and shuffled, as training reads them.
 *
 * A bug is a crash, a sanitizer report, a hang, or a window holding a
 * token id the open had promised to be below the vocabulary. */
#include "fuzz_input.h"

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { BATCH = 2, SEQ = 4, STRIDE = BATCH * SEQ };

static void read_windows(RtData *d, int64_t vocab) {
  int32_t window[STRIDE + 1];
  int64_t n = rt_data_windows(d);
  if (n <= 0) abort(); /* the open promises one window */
  for (int64_t step = 0; step < 2 * n && step < 16; step++) {
    int64_t w = rt_data_window_at(d, step, (int)(step & 1), 1337);
    if (w < 0 || w >= n) abort();
    rt_data_read(d, w, window);
    for (int i = 0; i <= STRIDE; i++)
      if (window[i] < 0 || window[i] >= vocab) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_input_file(data, size);
  static const int64_t vocabs[] = {256, 65536};
  for (int v = 0; v < 2; v++) {
    RtErr e;
    RtData *d = rt_data_open_checked(path, BATCH, SEQ, vocabs[v], &e);
    if (!d) {
      if (!*e.msg) abort();
      continue;
    }
    read_windows(d, vocabs[v]);
    rt_data_close(d);
  }
  return 0;
}
