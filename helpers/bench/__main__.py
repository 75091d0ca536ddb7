"""`torchrun --standalone --nproc_per_node N -m helpers.bench ...`
(see helpers.bench.measurement)."""
import sys

from helpers.bench.measurement import main

sys.exit(main())
