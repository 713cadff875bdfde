"""The bytes of the meta-service: log entry encoding and snapshot layout (see docs/meta_format.md).

Shared by the writers and the readers of both formats; change a constant here and both follow.
"""
import struct

# ---- limits, checked at the API boundary before anything is proposed
MAX_KEY_BYTES = 4096            # a key is a str of at most this many UTF-8 bytes
MAX_VALUE_BYTES = 1 << 20       # a value is bytes of at most 1 MiB
MAX_OPS_PER_TXN = 1024          # conditions + ops + branches of one transaction
U64_MAX = (1 << 64) - 1

# expire_at values above this are milliseconds, other values are seconds (Databend's rule)
EXPIRE_AT_MS_THRESHOLD = 100_000_000_000

# ---- log entry: canonical JSON, UTF-8, sorted keys, no spaces, bytes as standard base64
ENTRY_VERSION = 1
ENTRY_TIME = "t"       # u64 proposer time in ms
ENTRY_CMD = "c"        # the command object
ENTRY_VER = "v"        # ENTRY_VERSION

CMD_UPSERT = "upsert"
CMD_TXN = "txn"
CMD_ADD_NODE = "add_node"        # {"node": {"id", "address", "role"}, "overriding": bool}
CMD_REMOVE_NODE = "remove_node"  # {"id": n}

# upsert value forms
VALUE_UPDATE = "update"     # {"update": base64}
VALUE_DELETE = "delete"     # "delete"
VALUE_AS_IS = "as_is"       # "as_is"

# match_seq forms: null (ANY), ["exact", n], ["ge", n]
MATCH_EXACT = "exact"
MATCH_GE = "ge"

# condition targets and the six operators (the operator strings are the API's own)
TARGET_SEQ = "seq"
TARGET_VALUE = "value"
TARGET_PREFIX_COUNT = "prefix_count"
OPERATORS = ("==", "!=", "<", "<=", ">", ">=")

# boolean expressions of branches
EXPR_ALL = "all"
EXPR_ANY = "any"

# txn op kinds
OP_GET = "get"
OP_PUT = "put"
OP_DELETE = "delete"
OP_DELETE_BY_PREFIX = "delete_by_prefix"
OP_FETCH_ADD_U64 = "fetch_add_u64"
OP_PUT_SEQUENTIAL = "put_sequential"

# put_sequential key: prefix + the sequence value before the increment, zero-padded to 20 digits
SEQUENTIAL_KEY_DIGITS = 20

# ---- snapshot file
SNAPSHOT_MAGIC = b"LTMETASN"
SNAPSHOT_VERSION = 2             # 2 adds the node section; version 1 files (no nodes) still load
SNAPSHOT_VERSIONS = (1, 2)
# magic, version u32, last applied index u64, global seq u64, last entry time ms u64, key count u64
SNAPSHOT_HEADER = struct.Struct("<8sIQQQQ")
# per key: key length u32, data length u32, seq u64, expire_at_ms u64, proposed_at_ms u64
SNAPSHOT_RECORD = struct.Struct("<IIQQQ")
SNAPSHOT_NONE = U64_MAX          # stands for "no expire_at_ms" / "no proposed_at_ms"
# version 2, after the records: node count u32, then per node: id u64, role u8, address length u32, address
SNAPSHOT_NODES = struct.Struct("<I")
SNAPSHOT_NODE = struct.Struct("<QBI")
SNAPSHOT_ROLES = ("voter", "learner")    # role byte -> role
SNAPSHOT_TRAILER = struct.Struct("<I")   # crc32c of every byte before it
