"""Names of PFMH's per-client metrics in rounds.jsonl / summary.json, defined once.

The strategy, the centralized ceiling, the server's reports and the table drivers
all read these (no torch here, so the light readers stay light).
"""

#: Ours (per-client, local queries): mAP@ALL / mAP@K and how many clients gave one.
LOCAL_MAP_ALL = "local_map_all"
LOCAL_MAP_AT_K = "local_map_at_k"
LOCAL_CLIENTS = "local_clients"
#: The global protocol (primary): server queries against each client's database.
SQ_CLIENT_DB_MAP_ALL = "server_queries_client_db_map_all"
SQ_CLIENT_DB_MAP_AT_K = "server_queries_client_db_map_at_k"
