/* fuzz_readers.c: libFuzzer target for the rank programs' tensor readers.
 *
 * The generated programs read --in files with rt_parse_npy (.npy) and
 * rt_parse_pb (ONNX TensorProto, as the backend test suite stores them).
 * This target includes the very runtime template they embed
 * (templates/runtime.c) and feeds it arbitrary bytes: the first byte picks
 * the reader, the rest is the file. A reader must either accept the input
 * (with a buffer exactly the size its shape needs) or reject it through
 * rt_die, which RT_ON_DIE turns into a return here instead of an exit.
 * MPI is never started (rt_die only aborts the job once it is), so the
 * MPI library is linked but not used.
 */
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RANK 0
#define WORLD 1
static jmp_buf rt_fuzz_escape;
#define RT_ON_DIE(msg) ((void)(msg), longjmp(rt_fuzz_escape, 1))

#include "templates/runtime.c"

static void rt_abort_comms(void)
{
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* Readers take ownership-free views of a buffer that outlives them. */
    unsigned char *buf = malloc(size);
    if (!buf)
        abort();
    memcpy(buf, data + 1, size - 1);
    static RtTensor t; /* static: survives the longjmp */
    memset(&t, 0, sizeof t);
    if (setjmp(rt_fuzz_escape) == 0) {
        if (data[0] & 1)
            rt_parse_pb("fuzz.pb", buf, size - 1, &t);
        else
            rt_parse_npy("fuzz.npy", buf, size - 1, &t);
        /* Accepted: the data must be exactly what the shape says, and
         * readable to the end (ASan checks the bytes). */
        size_t want = rt_dtype_size(t.dtype);
        for (int i = 0; i < t.rank; i++)
            want *= (size_t)t.dims[i];
        if (want != t.bytes)
            abort();
        volatile unsigned char sink = 0;
        for (size_t i = 0; i < t.bytes; i++)
            sink ^= ((const unsigned char *)t.data)[i];
        (void)sink;
    }
    /* The .pb reader owns its data buffer, also when it gave up midway. */
    if (data[0] & 1)
        free(t.data);
    free(buf);
    return 0;
}
