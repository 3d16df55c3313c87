# The short way in. CMake does the building; this file only strings the
# steps together:
#
#   make demo       build (Release) and train a tiny GPT-2 on the bundled
#                   corpus, then sample from it (scripts/demo.sh)
#   make test       build and run the test suite
#   make test-asan  the same with clang, AddressSanitizer and UBSan, fuzz
#                   corpus replay included
#   make test-full  the whole 3D-parallel equivalence grid (tests/pp_run),
#                   of which make test runs a representative part
#   make fuzz       run libFuzzer on the readers for FUZZ_TIME seconds
#   make bench      time compiles of the paper's 1T model (bench/compile.sh)
#   make clean      remove the build folders
#
# Every target first runs scripts/install-deps.sh, which does nothing when
# the packages are there.

JOBS      := $(shell nproc)
BUILD     := build
ASAN      := build-asan
FUZZ_TIME ?= 60
MAKEFLAGS += --no-print-directory

.PHONY: all deps build demo test test-full build-asan test-asan fuzz bench clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)

# -LE full: the full grid stays out even in a folder test-full configured.
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j2 -LE full

test-full: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSHARDC_TEST_FULL=ON
	cmake --build $(BUILD) -j$(JOBS)
	ctest --test-dir $(BUILD) --output-on-failure -L full

# A separate folder: the sanitizers and clang's libFuzzer need their own
# objects. ctest there replays the fuzz corpus twice, through fuzz_replay
# and through the libFuzzer binary.
build-asan: deps
	cmake -S . -B $(ASAN) -DCMAKE_C_COMPILER=clang -DSHARDC_SANITIZE=ON -DSHARDC_FUZZ=ON
	cmake --build $(ASAN) -j$(JOBS)

# intercept_tls_get_addr=0 works around clang 14's LeakSanitizer crashing
# at exit ("Tracer caught signal 11") in programs with OpenMP threads, a
# sanitizer runtime bug fixed in LLVM 17 (llvm.org review D147459).
test-asan: build-asan
	ASAN_OPTIONS=$${ASAN_OPTIONS:+$$ASAN_OPTIONS:}intercept_tls_get_addr=0 \
	  ctest --test-dir $(ASAN) --output-on-failure -j2

# New inputs go to $(ASAN)/fuzz/corpus (the seeds in tests/fuzz/corpus stay
# as they are); a crash is written to $(ASAN)/fuzz/ and reproduced with
# `$(ASAN)/fuzz/fuzz_replay FILE`. Worth keeping: copy it into the corpus.
# -fork=1 runs the inputs in a child process that is replaced now and then:
# the compiler's arena is only freed at exit, so one long-lived process
# would grow without bound.
fuzz: build-asan
	mkdir -p $(ASAN)/fuzz/corpus
	$(ASAN)/fuzz/fuzz_frontend -fork=1 -max_total_time=$(FUZZ_TIME) -timeout=10 \
	  -rss_limit_mb=2048 -max_len=65536 -artifact_prefix=$(ASAN)/fuzz/ \
	  $(ASAN)/fuzz/corpus tests/fuzz/corpus

bench: build
	bench/compile.sh

clean:
	rm -rf $(BUILD) $(ASAN)
