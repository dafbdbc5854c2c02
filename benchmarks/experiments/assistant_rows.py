"""int8 decoders on float32 rows (the AVX2 default): the assistant's draft steps on bfloat16 rows
(aten's fused int8 kernel, load.assistant_precision's choice) or float32 rows (the row-int8 kernel).
30 LibriSpeech clips through transcribe in one process, the two pairs alternating; prints end-to-end
and decoding seconds per round (decisions, "Defaults by CPU kind"). Run under AVX2's kernel limits:

    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2 \
        python benchmarks/experiments/assistant_rows.py
"""
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import SPEECH, manifest_rows  # noqa: E402

from whisper_spec.longform.pipeline import transcribe  # noqa: E402
from whisper_spec.models import load as load_module  # noqa: E402
from whisper_spec.models.load import load_pair  # noqa: E402
from whisper_spec.options import DecodingOptions  # noqa: E402

rows = [r for r in manifest_rows() if r["set"] == "librispeech"][:30]
paths = [str(SPEECH / r["path"]) for r in rows]
pairs = {}
pairs["assistant bfloat16"] = load_pair("base", int8=True, dtype="float32")
orig = load_module.int8_assistant_in_bfloat16
load_module.int8_assistant_in_bfloat16 = lambda device: False
pairs["assistant float32"] = load_pair("base", int8=True, dtype="float32")
load_module.int8_assistant_in_bfloat16 = orig
print({k: str(p.assistant.decoder.dtype) for k, p in pairs.items()})
out = {}
for b in (1, 4):
    for r in range(2):
        for name, pair in (list(pairs.items()) if r % 2 == 0 else list(pairs.items())[::-1]):
            t = time.perf_counter()
            res = list(transcribe(pair, paths, DecodingOptions(), batch_size=b))
            dec = sum(x.stats.decoding_seconds for x in res)
            out.setdefault(f"{name} b{b}", []).append((round(time.perf_counter() - t, 2), round(dec, 2)))
            texts = [x.text for x in res]
            out.setdefault(f"texts b{b}", {})[name] = texts
        print(json.dumps({k: v for k, v in out.items() if not k.startswith("texts")}), flush=True)
for b in (1, 4):
    print(f"b{b} same texts:", len({tuple(v) for v in out[f'texts b{b}'].values()}) == 1)
