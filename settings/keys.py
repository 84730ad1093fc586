"""Config keys (``[tool.flwr.app.config]``) and message record keys, in one place.

Every module reads configuration and message payloads through these constants, so a
renamed key is one edit and a typo is a NameError instead of a silent default.
"""

# --- run config keys -------------------------------------------------------------
STRATEGY = "strategy"
ROUNDS = "rounds"
FRACTION_TRAIN = "fraction-train"
MIN_TRAIN_NODES = "min-train-nodes"
PROXIMAL_MU = "proximal-mu"
CODE_LENGTH = "code-length"
LOCAL_EPOCHS = "local-epochs"
LEARNING_RATE = "learning-rate"
BATCH_SIZE = "batch-size"
WEIGHT_DECAY = "weight-decay"
LOSS = "loss"
QUANTIZATION_WEIGHT = "quantization-weight"
MODEL = "model"
MODEL_WEIGHTS = "model-weights"
HIDDEN_DIM = "hidden-dim"
DATASET = "dataset"
DATA_PATH = "data-path"
DOWNLOAD = "download"
QUERY_FRACTION = "query-fraction"
PARTITIONING = "partitioning"
DIRICHLET_ALPHA = "dirichlet-alpha"
CLASSES_PER_CLIENT = "classes-per-client"
SEED = "seed"
EVAL_EVERY = "eval-every"
MAP_TOP_K = "map-top-k"
PRECISION_K = "precision-k"
RESULTS_DIR = "results-dir"
RUN_NAME = "run-name"
DEVICE = "device"
FEDHAP_VARIANT = "fedhap-variant"
TRIPLET_MARGIN = "triplet-margin"
TRIPLET_DISTANCE = "triplet-distance"
FEDHAP_MU = "fedhap-mu"
FEDHAP_LAMBDA = "fedhap-lambda"
PROTOTYPE_WEIGHTING = "prototype-weighting"
DISCRIMINATOR_HIDDEN_DIM = "discriminator-hidden-dim"
CODE_FLIP_EPSILON = "code-flip-epsilon"
PROTOTYPE_FLIP_EPSILON = "prototype-flip-epsilon"
FLIP_CALIBRATION = "flip-calibration"
PRIVACY_NOISE = "privacy-noise"
FEDHAP_INITIAL_PROTOTYPES = "fedhap-initial-prototypes"
DP_SGD = "dp-sgd"
DP_NOISE_MULTIPLIER = "dp-noise-multiplier"
DP_TARGET_EPSILON = "dp-target-epsilon"
DP_MAX_GRAD_NORM = "dp-max-grad-norm"
DP_DELTA = "dp-delta"
UPDATE_SPARSITY = "update-sparsity"
ELASTIC_NET_L1 = "elastic-net-l1"
ELASTIC_NET_L2 = "elastic-net-l2"
SECURE_AGGREGATION = "secure-aggregation"
DPHE_KEY_DIR = "dphe-key-dir"
DPHE_KEYHOLDER_URL = "dphe-keyholder-url"
DPHE_KEYHOLDER_CA = "dphe-keyholder-ca"
DPHE_PACKING = "dphe-packing"
DPHE_SCALE_BITS = "dphe-scale-bits"
DPHE_CLIP = "dphe-clip"
DPHE_WEIGHTING = "dphe-weighting"
DPHE_MAX_WEIGHT = "dphe-max-weight"
DPHE_MAX_CONTRIBUTORS = "dphe-max-contributors"
DPHE_CAPACITY = "dphe-capacity"
DPHE_PAD = "dphe-pad"
DPHE_PROTOTYPES = "dphe-prototypes"
DPHE_BLOCK_SPARSITY = "dphe-block-sparsity"
DPHE_OBFUSCATORS = "dphe-obfuscators"
PFMH_MODE = "pfmh-mode"
PFMH_VARIANT = "pfmh-variant"
PFMH_TAU = "pfmh-tau"
PFMH_ALPHA = "pfmh-alpha"
PFMH_BETA = "pfmh-beta"
PFMH_K = "pfmh-k"
PFMH_DROPOUT = "pfmh-dropout"

# --- node config keys (set by the simulation engine or ``--node-config``) --------
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
DPHE_KEY_BUNDLE = "dphe-key-bundle"  # this client's DPHE bundle (deployment)
NODE_DATA_PATH = "data-path"  # node-local data; overrides the run's data-path there

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
DPHE_SESSION = "dphe-session"  # train config: the keyholder's session id (hex)
QUERY_OP = "op"  # what a query message asks for
OP_DESCRIBE = "describe"  # reply with partition id and sizes
OP_ENCODE = "encode"  # encode the local database with the sent model
OP_PFMH_EVAL = "pfmh-eval"  # PFMH: per-client retrieval with the client's model
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
