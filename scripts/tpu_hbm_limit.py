"""XLA:TPU's HBM limit per chip, as libtpu's compiler states it (the TPU profiles' hbm_capacity_gib).

Compiles, ahead of time for a TPU topology (no TPU needed, libtpu only), a program larger than any chip's HBM and
prints the limit from the RESOURCE_EXHAUSTED message ("... exceeds available HBM (31.25G)"; XLA's G is GiB):

    pip install --target /tmp/libtpu libtpu==0.0.42.*      # jax[tpu] 0.10.2's pin
    PYTHONPATH=/tmp/libtpu python scripts/tpu_hbm_limit.py v6e:2x2 v5p:2x2x1 v5e:2x2

Measured with libtpu 0.0.42.1: v6e 31.25, v5p 95.74, v5e 15.75 GiB (v4:2x2x1 reports 15.25, half a v4 chip's
32 GiB, and is not used: the v4 profile keeps its GCP figure).
"""

from __future__ import annotations

import re
import sys


def limit_gib(topology: str) -> str:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices
    one = NamedSharding(Mesh(np.array(devices[:1]), ("x",)), P())
    x = jax.ShapeDtypeStruct((256,), jnp.float32, sharding=one)
    f = jax.jit(lambda v: jnp.broadcast_to(v, (200 * 1024, 1024, 256)) + 1.0, out_shardings=one)  # 200 GiB
    try:
        f.lower(x).compile()
    except Exception as e:  # noqa: BLE001 - the compiler's refusal is the measurement
        m = re.search(r"available HBM \(([\d.]+)G\)", str(e))
        return f"{devices[0].device_kind}: {m.group(1) if m else str(e)[:300]} GiB"
    return "compiled (no limit reached)"


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(name, limit_gib(name))
