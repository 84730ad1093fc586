"""E3: where the shared direction of H comes from at initialisation (mean pairwise cosine per stage)."""
from common import *
s = settings(32); xd, yd, xq, yq, dims = data(s)
def mc(t):
    t = F.normalize(t.flatten(1).float(), dim=1); return round((t @ t.T).mean().item(), 4)
for zero_bias in (False, True):
    model = build_run_model(s, dims).eval()
    if zero_bias:
        with torch.no_grad():
            for mod in model.modules():
                if isinstance(mod, torch.nn.Linear): mod.bias.zero_()
    with torch.no_grad():
        out = {f"x_{m}": mc(xd[m]) for m in model.modalities}
        ref = {}
        for m in model.modalities:
            f = model.extractors[m](xd[m]); out[f"f_{m}"] = mc(f)
            ref[m] = f * model.refiners[m](f); out[f"f'_{m}"] = mc(ref[m])
        cat = torch.cat([ref[m] for m in model.modalities], 1); out["concat"] = mc(cat)
        h = model.integrate(cat); out["H"] = mc(h)
        b = torch.tanh(model.hash_encoder(h)); out["b"] = mc(b)
    print("zero_bias" if zero_bias else "default_init", out)
