"""E4: the repo's own centralized trainer (experiments.centralized.train_centralized_pfmh),
variant wo-p, 10 clients Dirichlet 0.1, 15 rounds x 3 epochs, before/after the fix.
argv: BITS [fix]   fix = L_sim summed over the partners j (per sample i), mean over i."""
import sys, json
from common import *
import experiments.centralized as C
from hashing.losses import pairwise_similarity
bits = int(sys.argv[1]); fix = len(sys.argv) > 2 and sys.argv[2] == "fix"

def sim_sum_over_j(b, labels):
    n = len(b)
    if n < 2:
        return b.sum() * 0.0
    cos = F.normalize(b, dim=1) @ F.normalize(b, dim=1).T
    s = pairwise_similarity(labels.to(b.device)).to(b.dtype)
    off = ~torch.eye(n, dtype=torch.bool, device=b.device)
    return (cos - s).pow(2).masked_fill(~off, 0.0).sum(1).mean()

if fix:
    L.similarity_matching_loss = sim_sum_over_j
box = {}
_orig = C.build_run_model
def capture(*a, **k):
    box["m"] = _orig(*a, **k); return box["m"]
C.build_run_model = capture
s = settings(bits)
res = C.train_centralized_pfmh(s, 10)
model = box["m"]
split = load_split(s.dataset, **s.split_options())
ds = split.dataset
X = {m: torch.from_numpy(np.asarray(ds.inputs[m])).float() for m in ds.inputs}
_, b = embed_multimodal(model, X, device=DEV)
B = np.where(b.numpy() >= 0, 1, -1)
print(json.dumps({"bits": bits, "fix": fix, "distinct_codes_all_1797": int(len(np.unique(B, axis=0))),
                  "const_bits": int((np.abs(B.mean(0)) == 1).sum()),
                  "union_mAP_all": round(res["final"]["map_all"] if "map_all" in res["final"] else -1, 4),
                  "per_client_local_mAP_all": round(res["final_per_client"]["local_map_all"], 4),
                  "server_q_client_db_mAP_all": round(res["final_per_client"]["server_queries_client_db_map_all"], 4),
                  "train_loss": res["train_loss"], "sec": round(res["train_seconds"], 1)}), flush=True)
