"""make_llama.py: the Llama-7B-shaped graph of plan_bench.sh.

usage: make_llama.py OUTDIR [LAYERS] [BATCH]

A thin front for make_transformer.py's llama family (d 4096, 32 heads,
SwiGLU 11008, vocabulary 32000, sequence 128, batch 4 unless given):
OUTDIR/llama.onnx with its weights in a sparse external file that is never
written, and OUTDIR/llama_megatron.txt, the Megatron hand plan.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_transformer  # noqa: E402


def main():
    out = sys.argv[1]
    layers = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    n, params = make_transformer.build("llama", out, layers, batch, 128, 4096, 32, 11008, 32000)
    print("llama: %d layers, %d nodes, %.2f G parameters, sparse weights %.1f GB"
          % (layers, n, params / 1e9, params * 4 / 1e9))


if __name__ == "__main__":
    main()
