"""A bulk import run as its own process (so a test can SIGKILL it or let it fill a small disk).

    python -m tests.culturebase.bulk_import_proc KB_DIR N [--dim D] [--batch B] [--min-free-mb M] [--payload-chars C]

Entity ``i`` always gets the same id and vectors, so a rerun writes the same points.  Prints
``stored N`` after every acknowledged batch and one JSON line at the end (``{"stored":..}`` or
``{"error":.., "stored":..}`` with exit code 3).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from culturebase.entity import Entity
from culturebase.store import CultureBaseStore, EmbedderInfo
from culturebase.store.bulk import BulkImportError
from culturebase.store.culturebase import ENTITY_DENSE
from culturebase.store.edge import EdgeBackend
from culturebase.store.layout import LayoutPolicy


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kb")
    ap.add_argument("n", type=int)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--min-free-mb", type=float, default=0)
    ap.add_argument("--payload-chars", type=int, default=0)
    args = ap.parse_args()
    info = EmbedderInfo("proc-embedder", args.dim)
    store = CultureBaseStore(EdgeBackend(args.kb, layout_policy=LayoutPolicy(quantization="int8", on_disk="true")), info)
    rng = np.random.default_rng(0)
    try:
        with store.bulk_writer(total=args.n, min_free_bytes=int(args.min_free_mb * 2**20)) as writer:
            for start in range(0, args.n, args.batch):
                stop = min(args.n, start + args.batch)
                ents = [
                    Entity(name=f"entity {i}", description="x" * args.payload_chars, language="en") for i in range(start, stop)
                ]
                vecs = {name: rng.normal(size=(stop - start, args.dim)).astype(np.float32) for name in ENTITY_DENSE}
                writer.write(store.entity_points(ents, vecs))
                print(f"stored {writer.stored}", flush=True)
        print(json.dumps({"stored": writer.stored, "count": store.count()}), flush=True)
        return 0
    except BulkImportError as exc:
        print(json.dumps({"error": str(exc), "stored": exc.stored}), flush=True)
        return 3
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
