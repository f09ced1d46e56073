# onnx2spmd: plain Makefile. `make` builds build/onnx2spmd; `make test`
# runs everything CI runs. Every entry point first runs `make deps`, which
# installs missing Debian and PyPI packages (quiet when all is there).

CC       ?= cc
CLANG    ?= clang
CFLAGS   ?= -O2 -g
WARN     := -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE
INC      := -I. -Ibuild/gen
# protobuf-c and GLPK (the MILP solver behind --auto, with the libraries it
# needs) linked statically: the compiler then needs only libc, so it can be
# carried to a machine without them (the GPU machine of tests/gpu).
GLPK_LIBS := -l:libglpk.a -l:libcolamd.a -l:libamd.a -l:libsuitesparseconfig.a -l:libgmp.a -l:libltdl.a -l:libz.a -ldl
LDLIBS   := -l:libprotobuf-c.a $(GLPK_LIBS) -lm
VENV     := build/venv
PY       := $(VENV)/bin/python
FUZZ_SECONDS ?= 60
SECONDS  ?= 600
TRAIN_SECONDS ?= $(shell echo $$(( $(SECONDS) / 3 )))

LIB_SRC  := $(wildcard ir/*.c) $(wildcard frontend/*.c) $(wildcard partition/*.c) $(wildcard codegen/*.c) \
            $(wildcard driver/*.c)
GEN_SRC  := build/gen/onnx.pb-c.c build/gen/templates.c
FAMILIES  := math reduce index nn loss attn linalg train
TEMPLATES := templates/runtime.c templates/bodies.h templates/kernels.c templates/cuda_kernels.cu \
             $(FAMILIES:%=templates/bodies_%.h) $(FAMILIES:%=templates/kernels_%.c) $(FAMILIES:%=templates/cuda_%.cu)
TEST_SRC := $(wildcard tests/*/test_*.c)

OBJ_DIR  := build/obj
LIB_OBJ  := $(LIB_SRC:%.c=$(OBJ_DIR)/%.o) $(OBJ_DIR)/gen/onnx.pb-c.o $(OBJ_DIR)/gen/templates.o
TESTS    := $(TEST_SRC:tests/%.c=build/tests/%)

ASAN_DIR  := build/asan
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ASAN_OBJ  := $(LIB_SRC:%.c=$(ASAN_DIR)/%.o) $(ASAN_DIR)/gen/onnx.pb-c.o $(ASAN_DIR)/gen/templates.o
ASAN_TESTS := $(TEST_SRC:tests/%.c=$(ASAN_DIR)/tests/%)

.PHONY: all deps test unit cli lint asan fuzz demo models bench scale clean e2e generated conformance cuda-build fuzz-plans
.DEFAULT_GOAL := all

all: build/onnx2spmd

deps:
	@bash tools/deps.sh

# ---- protobuf-c code, generated from the installed onnx package ---------
build/gen/onnx.pb-c.c: | deps
	@mkdir -p build/gen
	@cp "$$($(PY) -c 'import onnx, os; print(os.path.dirname(onnx.__file__))')/onnx.proto" build/gen/onnx.proto
	cd build/gen && protoc-c --c_out=. onnx.proto
build/gen/onnx.pb-c.h: build/gen/onnx.pb-c.c

# ---- templates, embedded in the compiler --------------------------------
build/tools/embed: tools/embed.c
	@mkdir -p build/tools
	$(CC) -std=c11 -O2 -o $@ $<
build/gen/templates.c: build/tools/embed $(TEMPLATES)
	@mkdir -p build/gen
	build/tools/embed $@ template_runtime_c=templates/runtime.c template_bodies_h=templates/bodies.h \
	    template_kernels_c=templates/kernels.c \
	    template_cuda_kernels_cu=templates/cuda_kernels.cu \
	    $(foreach f,$(FAMILIES),template_bodies_$(f)_h=templates/bodies_$(f).h \
	        template_kernels_$(f)_c=templates/kernels_$(f).c template_cuda_$(f)_cu=templates/cuda_$(f).cu)
$(OBJ_DIR)/gen/templates.o: build/gen/templates.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -c $< -o $@
$(ASAN_DIR)/gen/templates.o: build/gen/templates.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -c $< -o $@

# ---- compiler -----------------------------------------------------------
$(OBJ_DIR)/%.o: %.c build/gen/onnx.pb-c.h | deps
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) $(INC) -MMD -MP -c $< -o $@
$(OBJ_DIR)/gen/onnx.pb-c.o: build/gen/onnx.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(CFLAGS) $(INC) -c $< -o $@

build/onnx2spmd: $(OBJ_DIR)/main.o $(LIB_OBJ)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# ---- unit tests (CMocka) ------------------------------------------------
build/tests/%: tests/%.c $(LIB_OBJ) tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) $(INC) -MMD -MP -o $@ $< $(LIB_OBJ) -lcmocka $(LDLIBS)

# The C target's kernels, from the templates themselves (built with mpicc:
# the runtime they sit on includes mpi.h; MPI is never started).
KERNEL_TEST := tests/kernels/kernels_blocks.c
KERNEL_DEPS := $(KERNEL_TEST) templates/runtime.c templates/bodies.h templates/kernels.c templates/bodies_reduce.h \
               templates/kernels_reduce.c templates/bodies_train.h templates/kernels_train.c
# Three builds: for any x86-64 (the packed GEMM is then CBLAS), for AVX2 +
# FMA (skipped on a CPU without them) and for this CPU (-march=native, as
# the generated Makefile builds: AVX-512 where there is one).
KERNEL_BINS := $(foreach v,generic avx2 native,build/tests/kernels/kernels_blocks_$(v))
build/tests/kernels/kernels_blocks_avx2: KERNEL_ISA := -mavx2 -mfma
build/tests/kernels/kernels_blocks_native: KERNEL_ISA := -march=native
build/tests/kernels/kernels_blocks_%: $(KERNEL_DEPS) | deps
	@mkdir -p $(dir $@)
	mpicc $(WARN) $(CFLAGS) $(KERNEL_ISA) -I. -o $@ $< -lcmocka -lopenblas -lm
$(ASAN_DIR)/tests/kernels/kernels_blocks: $(KERNEL_DEPS) | deps
	@mkdir -p $(dir $@)
	mpicc $(WARN) $(ASAN_FLAGS) -march=native -I. -o $@ $< -lcmocka -lopenblas -lm

unit: $(TESTS) $(KERNEL_BINS)
	@set -e; for t in $(TESTS); do echo "== $$t"; $$t; done
	@set -e; for t in $(KERNEL_BINS); do echo "== $$t"; OPENBLAS_NUM_THREADS=1 $$t; done

# No circle among a folder's source files (#includes, and calls or uses of
# what another file defines): each pass depends only on the ones below it.
# docs/ops.md's op tables are those of ir/*.def.
lint:
	@python3 tools/check_cycles.py codegen partition ir frontend driver
	@python3 tools/op_list.py --check

cli: build/onnx2spmd
	@bash tests/cli/test_cli.sh build/onnx2spmd
	@bash tests/cli/test_out_dir.sh build/onnx2spmd
	@bash tests/cli/test_files.sh build/onnx2spmd
	@$(PY) tests/cli/compile_memory.py build/onnx2spmd

# ---- sanitizers ---------------------------------------------------------
$(ASAN_DIR)/%.o: %.c build/gen/onnx.pb-c.h | deps
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(ASAN_FLAGS) $(INC) -MMD -MP -c $< -o $@
$(ASAN_DIR)/gen/onnx.pb-c.o: build/gen/onnx.pb-c.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 $(ASAN_FLAGS) $(INC) -c $< -o $@
$(ASAN_DIR)/tests/%: tests/%.c $(ASAN_OBJ) tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(ASAN_FLAGS) $(INC) -o $@ $< $(ASAN_OBJ) -lcmocka $(LDLIBS)
$(ASAN_DIR)/onnx2spmd: $(ASAN_DIR)/main.o $(ASAN_OBJ)
	$(CC) $(ASAN_FLAGS) -o $@ $^ $(LDLIBS)

asan: $(ASAN_TESTS) $(ASAN_DIR)/onnx2spmd $(ASAN_DIR)/tests/kernels/kernels_blocks
	@set -e; for t in $(ASAN_TESTS); do echo "== asan $$t"; $$t; done
	@echo "== asan $(ASAN_DIR)/tests/kernels/kernels_blocks"; OPENBLAS_NUM_THREADS=1 $(ASAN_DIR)/tests/kernels/kernels_blocks
	@bash tests/cli/test_cli.sh $(ASAN_DIR)/onnx2spmd
	@bash tests/cli/test_out_dir.sh $(ASAN_DIR)/onnx2spmd
	@bash tests/cli/test_files.sh $(ASAN_DIR)/onnx2spmd

# ---- fuzzing (libFuzzer) ------------------------------------------------
FUZZ_FLAGS := -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
build/fuzz/fuzz_frontend: tests/fuzz/fuzz_frontend.c $(LIB_SRC) $(GEN_SRC) | deps
	@mkdir -p build/fuzz
	$(CLANG) $(WARN) $(FUZZ_FLAGS) $(INC) -o $@ tests/fuzz/fuzz_frontend.c $(LIB_SRC) $(GEN_SRC) $(LDLIBS)

# The rank programs' .npy/.pb readers, from the runtime template itself.
MPI_CFLAGS = $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS = $(shell mpicc --showme:link 2>/dev/null)
build/fuzz/fuzz_readers: tests/fuzz/fuzz_readers.c templates/runtime.c | deps
	@mkdir -p build/fuzz
	$(CLANG) -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $(FUZZ_FLAGS) -I. $(MPI_CFLAGS) -o $@ tests/fuzz/fuzz_readers.c \
	    $(MPI_LIBS) -lopenblas -lm

fuzz: build/fuzz/fuzz_frontend build/fuzz/fuzz_readers
	@mkdir -p build/fuzz/readers_corpus
	@for f in tests/golden/*/*.npy; do cp -n "$$f" build/fuzz/readers_corpus/ 2>/dev/null; done; true
	@echo "fuzz: rank-program readers for $(FUZZ_SECONDS)s"
	@build/fuzz/fuzz_readers -artifact_prefix=build/fuzz/readers- -max_total_time=$(FUZZ_SECONDS) -max_len=65536 \
	    -print_final_stats=1 -rss_limit_mb=2048 build/fuzz/readers_corpus > build/fuzz/readers.log 2>&1; \
	    rc=$$?; grep -E "stat::number_of_executed_units" build/fuzz/readers.log; \
	    if [ $$rc -ne 0 ]; then grep -v "^#" build/fuzz/readers.log | tail -30; echo "fuzz: FAILED"; exit 1; fi
	@mkdir -p build/fuzz/corpus # seeds: the models, and tests/fuzz/seeds (an eager MoE block from tests/models/make_moe_block.py)
	@cp -n tests/models/*.onnx tests/models/ops/*.onnx tests/models/bad/*.onnx tests/fuzz/seeds/* tests/fuzz/regressions/* build/fuzz/corpus/ 2>/dev/null || true
	@echo "fuzz: frontend for $(FUZZ_SECONDS)s"
	@build/fuzz/fuzz_frontend -artifact_prefix=build/fuzz/ -max_total_time=$(FUZZ_SECONDS) -max_len=1048576 \
	    -print_final_stats=1 -rss_limit_mb=2048 build/fuzz/corpus > build/fuzz/last.log 2>&1; rc=$$?; \
	    grep -E "stat::number_of_executed_units" build/fuzz/last.log; \
	    if [ $$rc -ne 0 ]; then grep -v "^#" build/fuzz/last.log | tail -30; echo "fuzz: FAILED"; exit 1; fi

# ---- models and goldens -------------------------------------------------
models: | deps
	$(PY) tests/models/make_models.py

# ---- end to end ---------------------------------------------------------
# The suites below run thousands of short MPI jobs on one machine. OpenMPI's
# default start probes UCX first; ob1 over shared memory (vader) starts a
# 2-rank job in 0.19 s instead of 0.38 s. A setting in the environment wins.
test e2e train conformance fuzz-plans cuda-build: export OMPI_MCA_pml ?= ob1
test e2e train conformance fuzz-plans cuda-build: export OMPI_MCA_btl ?= self,vader

# Training: --train on the models of tests/models/train against
# onnxruntime-training's goldens, numpy and finite differences (also in e2e).
train: all
	@$(PY) tests/train/run_train.py

e2e: all
	@bash tests/e2e/run_golden.sh
	@bash tests/e2e/test_determinism.sh
	@bash tests/e2e/test_runtime_errors.sh
	@bash tests/e2e/run_ops_sharded.sh
	@$(PY) tests/e2e/attn_sharded.py
	@$(PY) tests/e2e/gpt2_vocab.py
	@$(PY) tests/e2e/pipeline.py
	@$(PY) tests/e2e/decode.py
	@$(PY) tests/e2e/moe.py --random 24 --seed 1
	@$(PY) tests/e2e/trace.py
	@$(PY) tests/e2e/test_hostile_names.py
	@$(PY) tests/train/run_train.py
	@$(PY) tests/e2e/fuzz_plans.py --seed 1 --count 150
	@$(PY) tests/e2e/fuzz_plans.py --seed 2 --count 60 --auto
	@$(PY) tests/e2e/fuzz_plans.py --seed 3 --count 40 --pipeline
	@# --train: one SGD step, the loss against ORT and gradients against finite differences
	@$(PY) tests/e2e/fuzz_plans.py --seed 4 --count 30 --train
	@$(PY) tests/e2e/fuzz_plans.py --seed 102 --count 20 --train --pipeline
	@# case 9: a Gemm whose C and output share the arena (gcc 12 -Warray-bounds)
	@$(PY) tests/e2e/fuzz_plans.py --seed 369321 --count 10
	@# case 1: Reshape [4,2] -> [8] -> [2,4] with [4,2] split in rows over 4: the [8]
	@# is cut in 4s, so the rows must go in 2s (partition/units.c)
	@$(PY) tests/e2e/fuzz_plans.py --seed 566872 --count 2

# Random graphs, meshes and shardings against ONNX Runtime, new seeds until SECONDS pass,
# then --train graphs (gradients against finite differences) for TRAIN_SECONDS
# (`fuzz_plans.py --replay DIR --minimize` shrinks a saved failure).
fuzz-plans: all
	@$(PY) tests/e2e/fuzz_plans.py --seconds $(SECONDS)
	@$(PY) tests/e2e/fuzz_plans.py --train --seconds $(TRAIN_SECONDS)

cuda-build: all
	@bash tests/e2e/cuda_build.sh

conformance: all
	@$(PY) tests/conformance/run.py

generated: all
	@bash tools/generated.sh

# ---- real size: Llama-7B- and 1.1B-shaped models from configs (sparse weights),
# compile time and memory against a plain copy and the streaming bound (long:
# not part of make test; docs/benchmarks.md)
scale: deps all
	@$(PY) bench/scale.py

# ---- benchmarks ---------------------------------------------------------
bench: deps all
	@bash tools/deps.sh --xla --train
	@bash bench/plan_bench.sh
	@$(PY) bench/compile_scale.py
	@$(PY) bench/codegen_bench.py
	@$(PY) bench/pipeline_bench.py
	@$(PY) bench/overlap_bench.py
	@$(PY) bench/auto_bench.py
	@build/venv-xla/bin/python bench/xla_bench.py
	@$(PY) bench/train_bench.py
	@$(PY) bench/decode_bench.py
	@$(PY) bench/moe_bench.py

# ---- top-level ----------------------------------------------------------
test: deps lint all unit cli
	@$(MAKE) --no-print-directory e2e
	@$(MAKE) --no-print-directory conformance
	@$(MAKE) --no-print-directory cuda-build
	@$(MAKE) --no-print-directory asan
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(if $(CI_FUZZ_SECONDS),$(CI_FUZZ_SECONDS),30)
	@echo "make test: all passed"

demo: deps all
	@bash tools/demo.sh

clean:
	rm -rf build/obj build/tests build/asan build/fuzz build/gen build/onnx2spmd

-include $(shell find build/obj build/asan build/tests -name '*.d' 2>/dev/null)
