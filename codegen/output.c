/* output.c: the output folder of `compile`, written completely or not at
 * all.
 *
 * Everything goes to a temporary sibling folder first (rank<k>.c,
 * weights.rank<k>.bin, o2s_runtime.h and o2s_kernels.h (headers.c), Makefile, run.sh, plan.txt, plan.json and the
 * .onnx2spmd-output marker); only when every file is written is it
 * renamed into place. An existing -o path is replaced only if it is an
 * earlier output: a real folder (never a symlink, never the model's own
 * folder) with the marker and nothing in it but the files the marker lists
 * and the rank binaries its Makefile builds. Anything else is a user's and
 * compile stops before touching it. Nothing in the files depends on time,
 * host or process, so two compiles of the same model and flags give
 * identical folders.
 */
#include "codegen.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The marker that makes a folder an onnx2spmd output, so that a later
 * `compile -o` may replace it: written last into the temporary folder,
 * it lists every file compile wrote and the rank count (the Makefile's
 * build products are rank0 .. rank<N-1>). */
#define OUT_MARKER ".onnx2spmd-output"
#define OUT_MARKER_MAX 65536

/* A file name compile could have written or make could have built: our
 * names are generated, so anything else in a marked folder is a user's. */
static int ours(const char *marker, long nranks, const char *name)
{
    if (strcmp(name, OUT_MARKER) == 0)
        return 1;
    if (strncmp(name, "rank", 4) == 0) {
        char *end;
        errno = 0;
        long k = strtol(name + 4, &end, 10);
        if (end != name + 4 && !*end && isdigit((unsigned char)name[4]) && errno == 0 && k < nranks)
            return 1; /* a built rank binary */
    }
    size_t n = strlen(name);
    const char *files = strstr(marker, "\nfiles:");
    for (const char *q = files ? files + 7 : ""; *q && *q != '\n';) {
        while (*q == ' ')
            q++;
        size_t len = strcspn(q, " \n");
        if (len == n && memcmp(q, name, n) == 0)
            return 1;
        q += len;
    }
    return 0;
}

/* Reads dir's marker (no symlinks, regular file, bounded) into buf. */
static int read_marker(const char *dir, char *buf, size_t cap)
{
    char path[8300];
    snprintf(path, sizeof path, "%s/%s", dir, OUT_MARKER);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (off_t)cap)
        n = read(fd, buf, cap - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = 0;
    static const char magic[] = "onnx2spmd output folder";
    return strncmp(buf, magic, sizeof magic - 1) == 0 ? 0 : -1;
}

int codegen_check_out_dir(const char *out_dir, const char *model, Diag *d)
{
    struct stat st;
    if (!*out_dir) {
        diag_add(d, "-o: empty path");
        return -1;
    }
    if (lstat(out_dir, &st) != 0) {
        if (errno == ENOENT)
            return 0; /* a new folder (parents are created) */
        diag_add(d, "-o %s: %s", out_dir, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        diag_add(d, "-o %s: is a symbolic link; compile never writes through one (give the real folder)", out_dir);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        diag_add(d, "-o %s: exists and is not a folder; refusing to replace it", out_dir);
        return -1;
    }
    char real_out[PATH_MAX], real_model[PATH_MAX], model_dir[PATH_MAX];
    snprintf(model_dir, sizeof model_dir, "%s", model);
    char *slash = strrchr(model_dir, '/');
    if (slash)
        *(slash == model_dir ? slash + 1 : slash) = 0;
    else
        snprintf(model_dir, sizeof model_dir, ".");
    if (realpath(out_dir, real_out) && realpath(model_dir, real_model) && strcmp(real_out, real_model) == 0) {
        diag_add(d, "-o %s: is the folder holding the model; refusing to replace it", out_dir);
        return -1;
    }
    char *marker = malloc(OUT_MARKER_MAX);
    if (!marker)
        abort();
    int rc = -1;
    if (read_marker(out_dir, marker, OUT_MARKER_MAX) != 0) {
        diag_add(d, "-o %s: exists and is not an onnx2spmd output folder (no %s marker); refusing to replace it",
                 out_dir, OUT_MARKER);
        goto cleanup;
    }
    const char *ranks = strstr(marker, "\nranks: ");
    long nranks = ranks ? strtol(ranks + 8, NULL, 10) : 0;
    DIR *dp = opendir(out_dir);
    if (!dp) {
        diag_add(d, "-o %s: %s", out_dir, strerror(errno));
        goto cleanup;
    }
    rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(dp));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        struct stat es;
        if (fstatat(dirfd(dp), e->d_name, &es, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(es.st_mode) ||
            !ours(marker, nranks, e->d_name)) {
            char shown[256];
            esc_term(e->d_name, shown, sizeof shown);
            diag_add(d, "-o %s: holds \"%s\", which compile did not write; move it away or choose another folder "
                        "(nothing was changed)", out_dir, shown);
            rc = -1;
        }
    }
    closedir(dp);
cleanup:
    free(marker);
    return rc;
}

/* Removes a folder compile wrote (or an earlier output it checked): only
 * the names it may hold, each unlinked (a link, never its target), then
 * the folder itself if that left it empty. */
static void remove_output(const char *dir)
{
    char *marker = malloc(OUT_MARKER_MAX);
    if (!marker)
        abort();
    if (read_marker(dir, marker, OUT_MARKER_MAX) != 0)
        marker[0] = 0; /* a half-written temporary folder: only its own files */
    const char *ranks = strstr(marker, "\nranks: ");
    long nranks = ranks ? strtol(ranks + 8, NULL, 10) : 0;
    DIR *dp = opendir(dir);
    if (dp) {
        for (struct dirent *e; (e = readdir(dp));)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
                (ours(marker, nranks, e->d_name) || !marker[0]))
                unlinkat(dirfd(dp), e->d_name, 0);
        closedir(dp);
    }
    rmdir(dir);
    free(marker);
}

static FILE *open_in(const char *dir, const char *name, Diag *d)
{
    char path[8300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        diag_add(d, "cannot write %s: %s", path, strerror(errno));
    return f;
}

static int close_checked(FILE *f, const char *name, Diag *d)
{
    if (fclose(f) != 0) {
        diag_add(d, "cannot write %s: %s", name, strerror(errno));
        return -1;
    }
    return 0;
}

/* Rank `rank`'s source file, for the program already built and its weight
 * file's checksum. */
static int write_rank(const Program *pr, int rank, const CompileOptions *opt, const char *dir, uint64_t sum,
                      unsigned *families, Diag *d)
{
    char name[64];
    if (opt->arena_bytes)
        opt->arena_bytes[rank] = pr->arena_bytes;
    if (opt->weight_bytes)
        opt->weight_bytes[rank] = pr->weight_bytes;
    if (opt->held_bytes)
        opt->held_bytes[rank] = pr->input_bytes;
    if (opt->rank_bytes)
        opt->rank_bytes[rank] = program_rank_bytes(pr);
    *families |= headers_families(pr);
    int cuda = strcmp(opt->target, "cuda") == 0;
    snprintf(name, sizeof name, "rank%d.%s", rank, cuda ? "cu" : "c");
    FILE *f = open_in(dir, name, d);
    if (!f)
        return -1;
    EmitOptions eo = {opt->command_line, opt->model, cuda ? &emit_target_cuda : &emit_target_mpi, opt->tf32,
                      pr->weight_bytes, sum};
    int erc = emit_rank(pr, &eo, f, d);
    return close_checked(f, name, d) || erc ? -1 : 0;
}

/* Every rank's program, its weights (written for all ranks at once, tensor
 * by tensor: main() checks each file's size and checksum), then its
 * source. */
static int write_ranks(const Plan *p, const CompileOptions *opt, const char *dir, unsigned *families, Diag *d)
{
    int n = plan_world_ranks(p), rc = -1;
    Program **prs = calloc((size_t)n, sizeof *prs);
    uint64_t *sums = calloc((size_t)n, sizeof *sums);
    if (!prs || !sums)
        abort();
    for (int r = 0; r < n; r++)
        if (!(prs[r] = program_build(p, r, &opt->prog, d)))
            goto out;
    if (weights_write(p->g, prs, n, dir, sums, d))
        goto out;
    for (int r = 0; r < n; r++)
        if (write_rank(prs[r], r, opt, dir, sums[r], families, d))
            goto out;
    rc = 0;
out:
    for (int r = 0; r < n; r++)
        program_free(prs[r]);
    free(prs);
    free(sums);
    return rc;
}

static int write_makefile_cuda(const Plan *p, const CompileOptions *opt, const char *dir, Diag *d)
{
    FILE *f = open_in(dir, "Makefile", d);
    if (!f)
        return -1;
    int multi = plan_world_ranks(p) > 1;
    fprintf(f, "# Builds the %d CUDA rank programs of this plan with nvcc against cuBLAS%s.\n"
               "# Generated by onnx2spmd %s. NVCC, CUDA_HOME, NCCL_HOME, MPICC, MPI and ARCH may be\n"
               "# overridden (e.g. make ARCH=sm_80). MPI=1 (the default where mpicc exists) builds\n"
               "# for run.sh (mpirun); MPI=0 builds without MPI, for launch.sh, Slurm or Kubernetes.\n\n"
               "CUDA_HOME ?= /usr/local/cuda\nNVCC ?= $(CUDA_HOME)/bin/nvcc\nMPICC ?= mpicc\nARCH ?= %s\n"
               "MPI ?= $(if $(shell command -v $(MPICC) 2>/dev/null),1,0)\n"
               "NVCCFLAGS ?= -O3 -std=c++17 -arch=$(ARCH)\nWARN ?= -Xcompiler -Wall,-Wextra\n\n",
            plan_world_ranks(p), multi ? ", NCCL and MPI" : " (one rank: no NCCL)", ONNX2SPMD_VERSION,
            opt->cuda_arch ? opt->cuda_arch : "sm_90");
    if (multi)
        fprintf(f, "# NCCL: NCCL_HOME if given, else the CUDA toolkit's, else the system's (libnccl-dev:\n"
                   "# /usr/include, /usr/lib/<triplet>), else python3's nvidia-nccl wheel (which ships\n"
                   "# only libnccl.so.2). The rank binaries find it through an rpath.\n"
                   "NCCL_HOME ?= $(shell if [ -e '$(CUDA_HOME)/include/nccl.h' ]; then echo '$(CUDA_HOME)'; \\\n"
                   "    elif [ -e /usr/include/nccl.h ]; then echo /usr; else \\\n"
                   "    python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null; fi)\n"
                   "NCCL_LIBDIR := $(firstword $(foreach d,lib64 lib lib/$(shell uname -m)-linux-gnu,$(if $(wildcard $(NCCL_HOME)/$(d)/libnccl.so*),$(NCCL_HOME)/$(d))))\n"
                   "NCCL_SO := $(notdir $(firstword $(wildcard $(NCCL_LIBDIR)/libnccl.so $(NCCL_LIBDIR)/libnccl.so.2)))\n"
                   "NCCL_FLAGS := $(if $(filter /usr,$(NCCL_HOME)),,-I$(NCCL_HOME)/include)\n"
                   "NCCL_LIBS := -L$(NCCL_LIBDIR) -l:$(NCCL_SO) -Xlinker -rpath -Xlinker $(NCCL_LIBDIR)\n"
                   "ifeq ($(NCCL_SO)$(filter clean,$(MAKECMDGOALS)),)\n"
                   "$(error NCCL not found (no libnccl.so under NCCL_HOME=$(NCCL_HOME)): set NCCL_HOME to a folder with include/nccl.h and lib/libnccl.so)\n"
                   "endif\n\n");
    fprintf(f, "ifeq ($(MPI),1)\n"
               "MPI_CFLAGS ?= $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -show | cut -d' ' -f2- | tr ' ' '\\n' | grep '^-I' | tr '\\n' ' ')\n"
               "MPI_LIBS ?= $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -show | cut -d' ' -f2- | tr ' ' '\\n' | grep '^-[Ll]' | tr '\\n' ' ')\n"
               "else\nMPI_CFLAGS := -DO2S_NO_MPI\nMPI_LIBS :=\nendif\n\nRANKS :=");
    for (int r = 0; r < plan_world_ranks(p); r++)
        fprintf(f, " rank%d", r);
    fprintf(f, "\n\nall: $(RANKS)\n\nrank%%: rank%%.cu " HEADER_RUNTIME " " HEADER_KERNELS_CUDA "\n"
               "\t$(NVCC) $(NVCCFLAGS) $(WARN) %s$(MPI_CFLAGS) -o $@ $< %s-L$(CUDA_HOME)/lib64 -lcublas $(MPI_LIBS)\n\n"
               "clean:\n\trm -f $(RANKS)\n\n.PHONY: all clean\n",
            multi ? "$(NCCL_FLAGS) " : "", multi ? "$(NCCL_LIBS) " : "");
    return close_checked(f, "Makefile", d);
}

/* launch.sh: the ranks of a CUDA plan started on this machine without
 * mpirun (for binaries built with make MPI=0). */
static int write_launch_sh(const Plan *p, const char *dir, Diag *d)
{
    FILE *f = open_in(dir, "launch.sh", d);
    if (!f)
        return -1;
    fprintf(f, "#!/usr/bin/env bash\n"
               "# Runs the %d ranks of this plan on this machine without mpirun (build with\n"
               "# make MPI=0); arguments go to every rank. Generated by onnx2spmd %s.\n"
               "# Each rank gets O2S_RANK, O2S_WORLD_SIZE and O2S_LOCAL_RANK; rank 0 hands the\n"
               "# NCCL id to the others through O2S_BOOTSTRAP_FILE. On a cluster, start rank<k>\n"
               "# on its node with the same variables and a bootstrap path on a shared file\n"
               "# system (Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID and torchrun's\n"
               "# RANK/WORLD_SIZE/LOCAL_RANK are read too). The first rank to fail stops the rest.\n"
               "set -u\nDIR=$(cd \"$(dirname \"$0\")\" && pwd)\n"
               "BOOT=$(mktemp -u \"${TMPDIR:-/tmp}/o2s-bootstrap.XXXXXX\")\n"
               "pids=()\n"
               "for r in $(seq 0 %d); do\n"
               "    O2S_RANK=$r O2S_WORLD_SIZE=%d O2S_LOCAL_RANK=$r O2S_BOOTSTRAP_FILE=$BOOT \"$DIR/rank$r\" \"$@\" &\n"
               "    pids+=($!)\n"
               "done\n"
               "trap 'kill \"${pids[@]}\" 2>/dev/null; rm -f \"$BOOT\"' EXIT\n"
               "status=0\n"
               "for _ in \"${pids[@]}\"; do\n"
               "    wait -n; rc=$?\n"
               "    if [ $rc -ne 0 ] && [ $status -eq 0 ]; then\n"
               "        status=$rc\n"
               "        kill \"${pids[@]}\" 2>/dev/null\n"
               "    fi\n"
               "done\n"
               "exit $status\n",
            plan_world_ranks(p), ONNX2SPMD_VERSION, plan_world_ranks(p) - 1, plan_world_ranks(p));
    if (close_checked(f, "launch.sh", d))
        return -1;
    char path[8300];
    snprintf(path, sizeof path, "%s/launch.sh", dir);
    chmod(path, 0755);
    return 0;
}

static int write_makefile(const Plan *p, const char *dir, Diag *d)
{
    FILE *f = open_in(dir, "Makefile", d);
    if (!f)
        return -1;
    fprintf(f, "# Builds the %d rank programs of this plan with mpicc against OpenBLAS.\n"
               "# Generated by onnx2spmd %s. MPICC, ARCH, CFLAGS and BLAS_LIBS may be overridden.\n"
               "# ARCH is the CPU the binaries are built for (gcc/clang -march): native, the one\n"
               "# running make, by default; to run them on another machine name its CPU, e.g.\n"
               "# make ARCH=x86-64-v3 (AVX2 machines), ARCH=x86-64-v4 (AVX-512), ARCH=x86-64 (any).\n"
               "# -fno-math-errno: nothing reads errno after a math call, and with it sqrtf is one\n"
               "# instruction, so loops over it (AdamW's update, Sqrt, the norms) vectorise.\n\n"
               "MPICC ?= mpicc\nARCH ?= native\nCFLAGS ?= -O3 -march=$(ARCH) -std=c11 -fno-math-errno\n"
               "WARN ?= -Wall -Wextra\n"
               "BLAS_LIBS ?= -lopenblas\n\n"
               "RANKS :=",
            plan_world_ranks(p), ONNX2SPMD_VERSION);
    for (int r = 0; r < plan_world_ranks(p); r++)
        fprintf(f, " rank%d", r);
    fprintf(f, "\n\nall: $(RANKS)\n\nrank%%: rank%%.c " HEADER_RUNTIME " " HEADER_KERNELS_C "\n\t$(MPICC) $(CFLAGS) $(WARN) -D_GNU_SOURCE -o $@ $< $(BLAS_LIBS) -lm\n\n"
               "clean:\n\trm -f $(RANKS)\n\n.PHONY: all clean\n");
    return close_checked(f, "Makefile", d);
}

static int write_run_sh(const Plan *p, const char *dir, Diag *d)
{
    FILE *f = open_in(dir, "run.sh", d);
    if (!f)
        return -1;
    fprintf(f, "#!/bin/sh\n"
               "# Runs the %d ranks of this plan as one MPI job; arguments go to every rank\n"
               "# (--in NAME=FILE, --out NAME=FILE.npy, --iters N). Generated by onnx2spmd %s.\n"
               "set -e\nDIR=$(cd \"$(dirname \"$0\")\" && pwd)\n"
               "export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1\n"
               "# OpenMPI refuses root without these; --oversubscribe lets %d ranks share fewer cores.\n"
               "if [ \"$(id -u)\" = 0 ]; then\n    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\nfi\n"
               "MPIRUN=${MPIRUN:-mpirun}\nMPIRUN_FLAGS=${MPIRUN_FLAGS:---oversubscribe}\n"
               "exec $MPIRUN $MPIRUN_FLAGS",
            plan_world_ranks(p), ONNX2SPMD_VERSION, plan_world_ranks(p));
    for (int r = 0; r < plan_world_ranks(p); r++)
        fprintf(f, "%s -np 1 \"$DIR/rank%d\" \"$@\"", r ? " :" : "", r);
    fprintf(f, "\n");
    if (close_checked(f, "run.sh", d))
        return -1;
    char path[8300];
    snprintf(path, sizeof path, "%s/run.sh", dir);
    chmod(path, 0755);
    return 0;
}

static int write_marker(const Plan *p, const CompileOptions *opt, const char *dir, Diag *d)
{
    FILE *f = open_in(dir, OUT_MARKER, d);
    if (!f)
        return -1;
    const char *ext = strcmp(opt->target, "cuda") == 0 ? "cu" : "c";
    fprintf(f, "onnx2spmd output folder, written by onnx2spmd %s compile.\n"
               "A later `onnx2spmd compile -o` may replace this folder as long as it holds only\n"
               "the files listed here and the rank binaries its Makefile builds.\n"
               "ranks: %d\nfiles:", ONNX2SPMD_VERSION, plan_world_ranks(p));
    for (int r = 0; r < plan_world_ranks(p); r++)
        fprintf(f, " rank%d.%s weights.rank%d.bin", r, ext, r);
    fprintf(f, " %s %s Makefile run.sh%s plan.txt plan.json\n", HEADER_RUNTIME,
            strcmp(ext, "cu") == 0 ? HEADER_KERNELS_CUDA : HEADER_KERNELS_C, strcmp(ext, "cu") == 0 ? " launch.sh" : "");
    return close_checked(f, OUT_MARKER, d);
}

int codegen_compile(const Plan *p, const CompileOptions *opt, Diag *d)
{
    if (strcmp(opt->target, "c") != 0 && strcmp(opt->target, "cuda") != 0) {
        diag_add(d, "--target %s: unknown target (c, cuda)", opt->target);
        return -1;
    }
    /* "out/" and "out" are the same folder; the temporary one is a
     * sibling, so the final rename stays on one file system. */
    char dir[4096], tmp[4200];
    size_t len = strlen(opt->out_dir);
    while (len > 1 && opt->out_dir[len - 1] == '/')
        len--;
    if (len >= sizeof dir - 32) {
        diag_add(d, "-o %s: path too long", opt->out_dir);
        return -1;
    }
    memcpy(dir, opt->out_dir, len);
    dir[len] = 0;
    if (strcmp(dir, "/") == 0) {
        diag_add(d, "-o /: refusing to replace the root folder");
        return -1;
    }
    if (codegen_check_out_dir(dir, opt->model, d))
        return -1;
    /* Create missing parent folders, as mkdir -p would. */
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *q = strchr(tmp + 1, '/'); q; q = strchr(q + 1, '/')) {
        *q = 0;
        mkdir(tmp, 0755);
        *q = '/';
    }
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", dir);
    if (!mkdtemp(tmp)) {
        diag_add(d, "-o %s: cannot create a folder beside it: %s", opt->out_dir, strerror(errno));
        return -1;
    }
    chmod(tmp, 0755);
    int cuda = strcmp(opt->target, "cuda") == 0;
    unsigned families = 0;
    if (write_ranks(p, opt, tmp, &families, d))
        goto fail;
    if (headers_write(tmp, cuda, families, d))
        goto fail;
    if ((cuda ? write_makefile_cuda(p, opt, tmp, d) || write_launch_sh(p, tmp, d) : write_makefile(p, tmp, d)) ||
        write_run_sh(p, tmp, d))
        goto fail;
    FILE *f = open_in(tmp, "plan.txt", d);
    if (!f)
        goto fail;
    {
        /* The schedule is the same on every rank (of a stage); rank 0's
         * (each stage's first rank's) says it. */
        int nstages = p->pipe ? p->pipe->nstages : 1;
        int nr = p->nreshards + 1;
        const char **sa = calloc((size_t)nr, sizeof(char *)), **wb = calloc((size_t)nr, sizeof(char *));
        int *fw = calloc((size_t)nr, sizeof(int));
        Program *pr0 = NULL;
        ProgramEstimate est = {0};
        for (int st = 0; st < nstages; st++) {
            program_free(pr0);
            pr0 = program_build(p, p->pipe ? pipeline_world_rank(p->pipe, st, 0) : 0, &opt->prog, d);
            if (!pr0) {
                free(sa);
                free(wb);
                free(fw);
                fclose(f);
                goto fail;
            }
            for (int r = 0; r < p->nreshards; r++) {
                if (!pr0->reshards[r].here)
                    continue;
                const Inst *s0 = &pr0->insts[pr0->reshards[r].start_at], *w0 = &pr0->insts[pr0->reshards[r].wait_at];
                /* A start placed before a node's compute is "at" that node; one
                 * placed after its producer is at the producer. */
                sa[r] = s0->node ? s0->node->label : NULL;
                wb[r] = w0->node ? w0->node->label : NULL;
                fw[r] = pr0->reshards[r].fused_leader;
            }
            if (st == 0)
                program_estimate(pr0, &est);
        }
        PlanSchedule sched = {sa, wb, fw, est.compute_s, est.comm_s, est.exposed_s, est.step_s};
        PlanFacts facts = {.sched = &sched};
        fprintf(f, "schedule: weight gathers prefetched %d node(s) ahead; all-reduces under %lld bytes fused\n",
                pr0->prefetch_used, (long long)opt->prog.fuse_bytes);
        plan_print_text(p, &facts, f);
        free(sa);
        free(wb);
        free(fw);
        program_free(pr0);
        if (close_checked(f, "plan.txt", d) || !(f = open_in(tmp, "plan.json", d)))
            goto fail;
        plan_print_json(p, &facts, f);
    }
    if (close_checked(f, "plan.json", d))
        goto fail;
    if (write_marker(p, opt, tmp, d))
        goto fail;
    /* Swap the finished folder into place: atomically exchanged with an
     * earlier output where the file system allows, so no moment exists
     * without one; the earlier output (checked above) is then removed. */
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno == EEXIST || errno == ENOTEMPTY) {
        if (codegen_check_out_dir(dir, opt->model, d))
            goto fail; /* changed since the first check */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
            remove_output(tmp);
            return 0;
        }
    }
    if (errno == EINVAL || errno == ENOSYS) {
        /* No renameat2 flags on this file system: move an earlier output
         * aside (onto an empty sibling made for it), then rename. */
        char old[4200];
        snprintf(old, sizeof old, "%s.old.XXXXXX", dir);
        struct stat st;
        int had_old = lstat(dir, &st) == 0;
        if (had_old && (codegen_check_out_dir(dir, opt->model, d) || !mkdtemp(old) || rename(dir, old) != 0)) {
            if (!d->n)
                diag_add(d, "-o %s: cannot move the earlier output aside: %s", opt->out_dir, strerror(errno));
            goto fail;
        }
        if (rename(tmp, dir) == 0) {
            if (had_old)
                remove_output(old);
            return 0;
        }
        if (had_old)
            rename(old, dir);
    }
    diag_add(d, "-o %s: cannot move the new output into place: %s", opt->out_dir, strerror(errno));
fail:
    remove_output(tmp);
    return -1;
}
