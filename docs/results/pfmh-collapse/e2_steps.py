"""E2: step-level trace of the first 2 epochs (50 Adam steps) of w/o-P training,
same optimiser/batches as hashing.pfmh.train.train_pfmh. argv: BITS [lip=meanbits|lsim=sumj]"""
import sys, json
from common import *
from hashing.batches import iterate_minibatches
bits = int(sys.argv[1]); kv = dict(a.split("=") for a in sys.argv[2:])
s = settings(bits); xd, yd, xq, yq, dims = data(s)
model = build_run_model(s, dims); cfg = pfmh_loss_config(s)
scale_ip = 1.0 / bits if kv.get("lip") == "meanbits" else 1.0
scale_sim = 63.0 if kv.get("lsim") == "sumj" else 1.0
opt = torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=1e-6)
gen = torch.Generator().manual_seed(0); torch.manual_seed(0)
step = 0
def show():
    d = diag(model, xd, yd); model.train()
    print(json.dumps({"step": step, **{k: round(d[k], 4) if isinstance(d[k], float) else d[k]
          for k in ("distinct", "const_bits", "bit_mean_abs", "h_meancos", "b_abs", "wh_mean_abs", "wh_std", "Lsim", "Lip")}}), flush=True)
show()
EPOCHS = int(kv.get("epochs", 2))
for ep in range(EPOCHS):
    for idx in iterate_minibatches(len(yd), 64, generator=gen):
        model.train()
        x = {m: t[idx] for m, t in xd.items()}; y = yd[idx]
        h, b = model(x)
        loss = cfg.alpha * scale_sim * L.similarity_matching_loss(b, y) + cfg.beta * scale_ip * L.information_preservation_loss(b)
        opt.zero_grad(); loss.backward(); opt.step(); step += 1
        if step in (1, 2, 5, 10, 15, 20, 25, 30, 40, 50) or step % 25 == 0:
            show()
