# The short way in. CMake does the building; this file only strings the
# steps together:
#
#   make demo       build (Release) and train a tiny GPT-2 on the bundled
#                   corpus, then sample from it (scripts/demo.sh);
#                   DEMO_TOKENIZER=bpe trains on byte-level BPE tokens
#   make test       build and run the test suite (within 8 minutes on two
#                   cores: the long checks are left out)
#   make test-long  the long checks (label `long`, tests/CMakeLists.txt)
#   make test-all   both in one run
#   make test-asan  the same with clang, AddressSanitizer and UBSan, fuzz
#                   corpus replay included
#   make test-full  the whole 3D-parallel equivalence grid (tests/features/pp_run),
#                   of which make test runs a representative part
#   make fuzz       run libFuzzer on each reader for FUZZ_TIME seconds
#                   (FUZZ=NAME for one: frontend safetensors state shard hw manifest
#                   latest checksums state_meta tokenizer st_index)
#   make bench      time compiles of the paper's 1T model (bench/compile.sh)
#   make gpu-kit    the GPU kit in build/gpu-kit (scripts/gpu-kit.sh,
#                   docs/gpu.md): every GPU check's programs and references,
#                   built without a GPU, at most 48 MiB
#   make clean      remove the build folders
#
# Every target first runs scripts/install-deps.sh, which does nothing when
# the packages are there.

JOBS      := $(shell nproc)
BUILD     := build
ASAN      := build-asan
FUZZ_TIME ?= 600
FUZZ      ?= frontend safetensors state shard hw manifest latest checksums state_meta tokenizer st_index
MAKEFLAGS += --no-print-directory

.PHONY: all deps build demo test test-long test-all test-full build-asan test-asan fuzz bench gpu-kit clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

# -LE full: the full grid stays out even in a folder test-full configured.
# The long checks (label long) have shorter siblings in make test.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j2 -LE 'full|long'

test-long: build
	ctest --test-dir $(BUILD) --output-on-failure -j2 -L long

test-all: build
	ctest --test-dir $(BUILD) --output-on-failure -j2 -LE full

test-full: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSHARDC_TEST_FULL=ON
	cmake --build $(BUILD) -j$(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -L full

# A separate folder: the sanitizers and clang's libFuzzer need their own
# objects. ctest there replays every fuzz corpus through every harness
# twice, through fuzz_replay_NAME and through the libFuzzer binary.
build-asan: deps
	cmake -S . -B $(ASAN) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSHARDC_SANITIZE=ON -DSHARDC_FUZZ=ON
	cmake --build $(ASAN) -j$(JOBS)

# intercept_tls_get_addr=0 works around clang 14's LeakSanitizer crashing
# at exit ("Tracer caught signal 11") in programs with OpenMP threads, a
# sanitizer runtime bug fixed in LLVM 17 (llvm.org review D147459).
test-asan: build-asan
	ASAN_OPTIONS=$${ASAN_OPTIONS:+$$ASAN_OPTIONS:}intercept_tls_get_addr=0 \
	  ctest --test-dir $(ASAN) --output-on-failure -j2

# One campaign per harness in $(FUZZ), FUZZ_TIME seconds each. New inputs
# go to $(ASAN)/fuzz/corpus/NAME (the seeds in tests/features/fuzz/corpus/NAME stay
# as they are); a crash is written to $(ASAN)/fuzz/NAME-crash-* and
# reproduced with `$(ASAN)/fuzz/fuzz_replay_NAME FILE`. An input that once
# failed belongs in tests/features/fuzz/corpus/NAME, which ctest replays through
# every harness. The frontend runs with -fork=1: the compiler's arena is
# only freed at exit, so one long-lived process would grow without bound.
# -close_fd_mask=2 silences the readers' error messages; libFuzzer and the
# sanitizers keep reporting on a copy of stderr.
fuzz: build-asan
	@set -e; for h in $(FUZZ); do \
	  mkdir -p $(ASAN)/fuzz/corpus/$$h; \
	  fork=; [ $$h = frontend ] && fork=-fork=1; \
	  echo "fuzz: $$h for $(FUZZ_TIME) s"; \
	  $(ASAN)/fuzz/fuzz_$$h $$fork -max_total_time=$(FUZZ_TIME) -timeout=10 \
	    -rss_limit_mb=2048 -max_len=65536 -close_fd_mask=2 -print_final_stats=1 \
	    -artifact_prefix=$(ASAN)/fuzz/$$h- $(ASAN)/fuzz/corpus/$$h tests/features/fuzz/corpus/$$h; \
	done

bench: build
	bench/compile.sh

gpu-kit: build
	scripts/gpu-kit.sh $(BUILD) $(BUILD)/gpu-kit

clean:
	rm -rf $(BUILD) $(ASAN)
