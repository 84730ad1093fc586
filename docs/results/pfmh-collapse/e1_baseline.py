"""E1: baseline w/o-P (L_hash only), paper alpha/beta, lr 1e-4, 15 rounds x 3 epochs; bits from argv."""
import sys
from common import *
bits = int(sys.argv[1])
run(bits, rounds=15, every=3, grads=True)
