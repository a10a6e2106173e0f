"""One rank of a multi-GPU training job, as torchrun starts it (test_ranks.py).

    rank_job.py OUT_DIR DATA OPTIONS_JSON

Makes a prepflow.Loader with nothing about ranks or the job in its
arguments (they come from torchrun's environment), runs one epoch, and
writes what it delivered to OUT_DIR/rank<R>.json. The ranks wait for each
other after making their loaders and before closing them, as a training
job's process group and collectives make them do (here by files, so that no
process group is needed).
"""
import json
import os
import sys
import time

import prepflow
from prepflow import ops


def main():
    out_dir, data, extra = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    pipeline = [ops.Decode(), ops.RandomResizedCrop(size=16), ops.RandomHorizontalFlip(),
                ops.Normalize()]
    loader = prepflow.Loader(data, pipeline, batch_size=32, seed=11, epochs=1, threads=1,
                             as_numpy=True, **extra)
    barrier(out_dir, "ready", loader.rank, loader.world_size)
    indices, batches = [], 0
    for batch in loader.batches():
        indices.extend(int(i) for i in batch.indices)
        batches += 1
    st = loader.stats()
    result = {"rank": loader.rank, "world_size": loader.world_size, "job_id": loader.job_id,
              "env_rank": int(os.environ["RANK"]), "batches": batches, "len": len(loader),
              "indices": indices, "padded": st["padded_samples_per_epoch"],
              "checksum": st["checksum"], "remote_images": st["remote_images"],
              "local_cores": st["local_cores"]}
    with open(os.path.join(out_dir, f"rank{loader.rank}.json"), "w") as f:
        json.dump(result, f)
    barrier(out_dir, "done", loader.rank, loader.world_size)
    loader.close()


def barrier(out_dir, name, rank, world_size):
    open(os.path.join(out_dir, f"{name}{rank}"), "w").close()
    deadline = time.time() + 120
    while not all(os.path.exists(os.path.join(out_dir, f"{name}{r}")) for r in range(world_size)):
        if time.time() > deadline:
            sys.exit(f"rank {rank}: the other ranks never reached '{name}'")
        time.sleep(0.02)


if __name__ == "__main__":
    main()
