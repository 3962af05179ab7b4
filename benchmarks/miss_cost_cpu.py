"""Miss against hit on the CPU: the GPU benchmark's logic on a small Llama shape, one core.

Cached prefixes 0 to 2,048 tokens × 16 to 512 new tokens of `tiny-llama` in fp32, each as a
miss and as a hit through the paged KV cache, median of 5; prints the table and the cost
model's error on held-out shapes. About a minute on one core.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from prefixscope.gpu_replay import bench

if __name__ == "__main__":
    out = Path(tempfile.gettempdir()) / "prefixscope_miss_cost_cpu.json"
    sys.exit(
        bench.main(
            [
                "--device",
                "cpu",
                "--model",
                "tiny-llama",
                "--cached",
                "0,128,512,1024,2048",
                "--new",
                "16,64,128,256,512",
                "--repeats",
                "5",
                "--out",
                str(out),
            ]
        )
    )
