"""A byte tokenizer (one token per byte, no merges) saved where the replay tools read one:
``OUT/tokenizer`` as a folder, and a Hugging Face cache entry ``local/bytes`` under
``OUT/hf`` (AIPerf, offline, loads a tokenizer from the cache only). Decoding and encoding
again give the same count, so the server counts what the tool meant to send. Runs in the
replay tools' scratch environment (``tokenizers``, ``transformers``); nothing is downloaded.

    python tokenizer.py OUT
"""

import shutil
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

out = Path(sys.argv[1])
vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
vocab["<eos>"] = len(vocab)
tokens = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tokens.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
tokens.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tokens, eos_token="<eos>").save_pretrained(
    out / "tokenizer"
)
revision = "0" * 40
entry = out / "hf" / "hub" / "models--local--bytes"
shutil.copytree(out / "tokenizer", entry / "snapshots" / revision)
(entry / "refs").mkdir(parents=True)
(entry / "refs" / "main").write_text(revision)
