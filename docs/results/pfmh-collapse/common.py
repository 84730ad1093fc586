"""Shared harness: centralized PFMH w/o-P training on multiview-digits with diagnostics."""
import sys, time, json
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
import numpy as np
import torch
torch.set_num_threads(1)
import torch.nn.functional as F
from settings.run_settings import RunSettings
from settings.run_model import build_run_model
from strategies.pfmh.model import pfmh_loss_config
from hashdata import load_split
from hashdata.multiview import modality_dims
from hashing.pfmh.train import train_pfmh, embed_multimodal
from hashing.pfmh import losses as L
from hashing.codes import sign_codes, pack_codes
from hashing.retrieval import mean_average_precision

DEV = torch.device("cpu")

def settings(bits, **kw):
    cfg = {"strategy": "pfmh", "dataset": "multiview-digits", "code-length": bits,
           "pfmh.variant": "wo-p", "pfmh.mode": "fedavg", "partitioning": "dirichlet",
           "dirichlet-alpha": 0.1, "rounds": 15, "local-epochs": 3,
           "learning-rate": 1e-4, "weight-decay": 1e-6, "batch-size": 64, "device": "cpu"}
    cfg.update(kw)
    return RunSettings.from_config(cfg)

def data(s):
    split = load_split(s.dataset, **s.split_options())
    ds = split.dataset
    X = {m: torch.from_numpy(np.asarray(ds.inputs[m])).float().flatten(1) for m in ds.inputs}
    y = torch.from_numpy(ds.labels)
    db, q = split.database_index, split.query_index
    return ({m: t[db] for m, t in X.items()}, y[db], {m: t[q] for m, t in X.items()}, y[q],
            {m: t.shape[1] for m, t in X.items()})

def mapall(model, xq, yq, xd, yd):
    _, bq = embed_multimodal(model, xq, device=DEV)
    _, bd = embed_multimodal(model, xd, device=DEV)
    return mean_average_precision(pack_codes(sign_codes(bq.numpy())), pack_codes(sign_codes(bd.numpy())),
                                  yq.numpy(), yd.numpy())

@torch.no_grad()
def diag(model, xd, yd):
    """Code statistics and the decomposition of z = W h + c (pre-tanh)."""
    h, b = embed_multimodal(model, xd, device=DEV)
    B = torch.where(b >= 0, 1.0, -1.0)
    distinct = len(np.unique(B.numpy(), axis=0))
    W, c = model.hash_encoder.weight, model.hash_encoder.bias
    wh = h @ W.T
    z = wh + c
    hn = F.normalize(h, dim=1)
    hcos = (hn @ hn.T).mean().item()
    return dict(distinct=distinct,
                bit_mean_abs=B.mean(0).abs().mean().item(),        # 1 = every bit constant
                const_bits=int((B.mean(0).abs() == 1).sum()),
                b_abs=b.abs().mean().item(),
                bias_abs=c.abs().mean().item(),
                wh_mean_abs=wh.mean(0).abs().mean().item(),        # shared (sample-independent) part of Wh
                wh_std=wh.std(0).mean().item(),                    # sample-dependent part
                z_abs=z.abs().mean().item(),
                W_rownorm=W.norm(dim=1).mean().item(),
                h_meancos=hcos,
                Lsim=L.similarity_matching_loss(b, yd).item(),
                Lip=L.information_preservation_loss(b).item())

def grad_parts(model, xd, yd, cfg, n=256, seed=0):
    """Norm of d(alpha Lsim)/db and d(beta Lip)/db on one eval batch, and their cosine;
    also the gradient of each term on the hash-layer bias."""
    model.eval()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(yd), generator=g)[:n]
    x = {m: t[idx] for m, t in xd.items()}
    y = yd[idx]
    out = {}
    grads = {}
    for name, fn in (("sim", lambda b: cfg.alpha * L.similarity_matching_loss(b, y)),
                     ("ip", lambda b: cfg.beta * L.information_preservation_loss(b))):
        model.zero_grad()
        h, b = model(x)
        b.retain_grad()
        fn(b).backward()
        grads[name] = b.grad.detach().clone()
        out[f"g_{name}_b"] = b.grad.norm().item()
        out[f"g_{name}_bias"] = model.hash_encoder.bias.grad.norm().item()
        # share of the b-gradient that is common to all samples (a 'bias-like' push)
        gm = b.grad.mean(0, keepdim=True)
        out[f"g_{name}_common_frac"] = (gm.expand_as(b.grad).norm() / b.grad.norm()).item()
    model.zero_grad()
    return out

def run(bits, rounds=15, cfg_overrides=None, log=True, lr=1e-4, seed=0, patch=None, every=1, wd=1e-6, grads=False):
    s = settings(bits, **{"learning-rate": lr, "seed": seed, "weight-decay": wd})
    xd, yd, xq, yq, dims = data(s)
    model = build_run_model(s, dims)
    cfg = pfmh_loss_config(s)
    if cfg_overrides:
        from dataclasses import replace
        cfg = replace(cfg, **cfg_overrides)
    gen = torch.Generator().manual_seed(s.seed)
    hist = []
    d = diag(model, xd, yd); d.update(round=0, mAP=mapall(model, xq, yq, xd, yd))
    if grads: d.update(grad_parts(model, xd, yd, cfg))
    hist.append(d)
    if log: print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}), flush=True)
    for r in range(1, rounds + 1):
        st = train_pfmh(model, xd, yd, personal_prototypes=None, global_prototypes=None, config=cfg,
                        num_classes=10, epochs=s.local_epochs, batch_size=s.batch_size,
                        learning_rate=s.learning_rate, weight_decay=s.weight_decay, device=DEV, generator=gen)
        if r % every == 0 or r == rounds:
            d = diag(model, xd, yd); d.update(round=r, mAP=mapall(model, xq, yq, xd, yd),
                                              tr_sim=st["hash_similarity"], tr_ip=st["information_preservation"])
            if grads: d.update(grad_parts(model, xd, yd, cfg))
            hist.append(d)
            if log: print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}), flush=True)
    return hist
