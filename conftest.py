"""Root pytest set-up, loaded before any test module or notebook kernel.

Fixes the environment that both the unit tests and the nbval notebook kernels inherit:

* ``FEDLAM_WIDGETS=static``: explorers render their default figure, as in the committed
  outputs (see :mod:`fedlam.widgets`).
* One BLAS/OpenMP thread: the notebooks' committed outputs were produced this way, results
  do not depend on the machine's core count through summation order, and the pytest process
  and a notebook kernel never oversubscribe a small machine.
"""

from __future__ import annotations

import os

os.environ["FEDLAM_WIDGETS"] = "static"
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

# Property tests draw the same examples on every run (reproducible CI); the example
# database is not needed then.
from hypothesis import settings as _hyp_settings  # noqa: E402

_hyp_settings.register_profile("fedlam", derandomize=True, database=None)
_hyp_settings.load_profile("fedlam")
