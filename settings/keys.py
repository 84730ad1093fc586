"""Message record keys and node config keys, in one place.

Every module reads configuration and message payloads through these constants, so a
renamed key is one edit and a typo is a NameError instead of a silent default.
"""

# --- run config keys: derived from the config dataclasses, never restated here:
# RunSettings.key("code_length") == "code-length", DPHEConfig.key("scale_bits") ==
# "dphe.scale-bits" (settings/schema.py)

# --- node config keys (set by the simulation engine or ``--node-config``) --------
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
DPHE_KEY_BUNDLE = "dphe-key-bundle"  # this client's DPHE bundle (deployment)
NODE_DATA_PATH = "data-path"  # node-local data; overrides the run's data-path there
PRIVACY_POLICY = "privacy-policy"  # this node's privacy policy file (privacy/policy.py)
NODE_STATE_DIR = "state-dir"  # this node's state folder (its privacy ledger)

# --- message types: Flower's "<category>.<action>"; the ClientApp routes on them --
QUERY_DESCRIBE = "query.describe"  # reply with partition id, sizes and device
QUERY_ENCODE = "query.encode"  # encode the local database with the sent model
QUERY_PFMH_EVAL = "query.pfmh_eval"  # PFMH: per-client retrieval, client's own model
QUERY_DPCODE = "query.dpcode"  # DPcode: the node's private top-k pattern release

# --- message record keys ---------------------------------------------------------
ARRAYS = "arrays"  # ArrayRecord: model parameters
CONFIG = "config"  # ConfigRecord: per-round instructions
METRICS = "metrics"  # MetricRecord: client metrics (FedAvg wants "num-examples")
CODES = "codes"  # ArrayRecord: published database codes (packed bits) + labels
PROTOTYPES = "prototypes"  # ArrayRecord: FedHAP class prototypes (up and down)
PRIVACY = "privacy"  # ConfigRecord: privacy mechanisms a client applied to a reply
DPHE = "dphe"  # ArrayRecord: a DPHE-encrypted model update (replaces "arrays")
DPHE_PROTOS = "dphe-prototypes"  # ArrayRecord: encrypted FedHAP prototype sums
PFMH_UPLOAD = "pfmh-prototypes"  # ArrayRecord: a client's Eq. 5 prototypes (up)
PFMH_PERSONAL = "pfmh-personal"  # ArrayRecord: the client's completed set (down)
PFMH_CENTRALIZED = "pfmh-centralized"  # ArrayRecord: the Eq. 6 set (down)
PFMH_QUERIES = "pfmh-queries"  # ArrayRecord: the server's query inputs, per modality
PFMH_MODEL_STATE = "pfmh-model"  # ArrayRecord in context.state: the personal model

# entries inside records
NUM_EXAMPLES = "num-examples"  # Flower's FedAvg weighting key
TRAIN_LOSS = "train-loss"
PFMH_LOSS_PREFIX = "loss-"  # PFMH train metrics: loss-global, loss-local, ...
SERVER_ROUND = "server-round"
PROXIMAL_MU = "proximal-mu"  # train config: Flower FedProx's own entry
DPHE_SESSION = "dphe-session"  # train config: the keyholder's session id (hex)
DPHE_SESSION_PROOF = "dphe-session-proof"  # train config: session bound to the run
NUM_CLASSES = "num-classes"  # train config under DPHE: size of the label space
FAULT = "fault"  # train config: the fault this client must act out (settings.faults)
FAULT_DELAY = "fault-delay"  # train config: seconds a "timeout" fault sleeps
PACKED_CODES = "packed-codes"
CODE_LABELS = "labels"
CODE_BITS = "bits"
NUM_DATABASE = "num-database"
NODE_DEVICE = "device"  # the device a node trains on, reported at discovery
PROTO_CLASSES = "classes"  # (m,) int64 class ids of the prototypes in the record
PROTO_CODES = "codes"  # (m, bits) float32: relaxed means (up) or +-1 signs (down)
PROTO_COUNTS = "counts"  # (m,) int64 per-class sample counts (uploads only)
PROTO_VECTORS = "vectors"  # (m, k) float32 unit-norm PFMH prototypes
QUERY_CODES = "query-codes"  # packed codes of the server's queries (PFMH eval)
LOCAL_MAP_ALL = "local-map-all"  # PFMH eval: this client's local-query mAP@ALL
LOCAL_MAP_AT_K = "local-map-at-k"  # PFMH eval: ... and mAP@K
LOCAL_QUERIES = "local-queries"  # PFMH eval: number of local queries
LOCAL_DATABASE = "local-database"  # PFMH eval: size of the local database
PRIV_MECHANISMS = "mechanisms"  # list[str], one entry per mechanism applied
PRIV_EPSILONS = "epsilons"  # list[float]
PRIV_DELTAS = "deltas"  # list[float]
PRIV_UNITS = "units"  # list[str]: the neighbouring relation of each epsilon

# privacy mechanism names, as clients report them and the server requires them
MECH_CODES_FLIP = "random-flipping/codes"
MECH_PROTOTYPES_FLIP = "random-flipping/prototypes"
MECH_DP_SGD = "dp-sgd/model"

# prefix of the discriminator's parameters inside the global ArrayRecord (FedHAP)
DISCRIMINATOR_PREFIX = "discriminator."
