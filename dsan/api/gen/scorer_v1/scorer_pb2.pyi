from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Pod(_message.Message):
    __slots__ = ("namespace", "name", "uid", "requests", "annotations", "priority")
    class RequestsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    uid: str
    requests: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    priority: int
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ..., uid: _Optional[str] = ..., requests: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., priority: _Optional[int] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("pod", "node_names", "node_indices", "node_table_epoch")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    NODE_INDICES_FIELD_NUMBER: _ClassVar[int]
    NODE_TABLE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    pod: Pod
    node_names: _containers.RepeatedScalarFieldContainer[str]
    node_indices: bytes
    node_table_epoch: int
    def __init__(self, pod: _Optional[_Union[Pod, _Mapping]] = ..., node_names: _Optional[_Iterable[str]] = ..., node_indices: _Optional[bytes] = ..., node_table_epoch: _Optional[int] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("scores", "policy", "snapshot_version", "fallback_nodes", "unknown_nodes", "node_table_epoch")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_VERSION_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_NODES_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_NODES_FIELD_NUMBER: _ClassVar[int]
    NODE_TABLE_EPOCH_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedScalarFieldContainer[int]
    policy: str
    snapshot_version: int
    fallback_nodes: int
    unknown_nodes: int
    node_table_epoch: int
    def __init__(self, scores: _Optional[_Iterable[int]] = ..., policy: _Optional[str] = ..., snapshot_version: _Optional[int] = ..., fallback_nodes: _Optional[int] = ..., unknown_nodes: _Optional[int] = ..., node_table_epoch: _Optional[int] = ...) -> None: ...

class NodeTableRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeTableResponse(_message.Message):
    __slots__ = ("epoch", "node_names")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    node_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, epoch: _Optional[int] = ..., node_names: _Optional[_Iterable[str]] = ...) -> None: ...

class ReclaimRequest(_message.Message):
    __slots__ = ("pod", "candidates")
    POD_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    pod: Pod
    candidates: _containers.RepeatedCompositeFieldContainer[ReclaimCandidate]
    def __init__(self, pod: _Optional[_Union[Pod, _Mapping]] = ..., candidates: _Optional[_Iterable[_Union[ReclaimCandidate, _Mapping]]] = ...) -> None: ...

class ReclaimCandidate(_message.Message):
    __slots__ = ("node", "victim_uids", "pdb_violations")
    NODE_FIELD_NUMBER: _ClassVar[int]
    VICTIM_UIDS_FIELD_NUMBER: _ClassVar[int]
    PDB_VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    node: str
    victim_uids: _containers.RepeatedScalarFieldContainer[str]
    pdb_violations: int
    def __init__(self, node: _Optional[str] = ..., victim_uids: _Optional[_Iterable[str]] = ..., pdb_violations: _Optional[int] = ...) -> None: ...

class ReclaimResponse(_message.Message):
    __slots__ = ("node", "reclaimer")
    NODE_FIELD_NUMBER: _ClassVar[int]
    RECLAIMER_FIELD_NUMBER: _ClassVar[int]
    node: str
    reclaimer: str
    def __init__(self, node: _Optional[str] = ..., reclaimer: _Optional[str] = ...) -> None: ...

class FilterRequest(_message.Message):
    __slots__ = ("pod", "node_names")
    POD_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    pod: Pod
    node_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pod: _Optional[_Union[Pod, _Mapping]] = ..., node_names: _Optional[_Iterable[str]] = ...) -> None: ...

class FilterResponse(_message.Message):
    __slots__ = ("refused", "policy")
    class RefusedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    refused: _containers.ScalarMap[str, str]
    policy: str
    def __init__(self, refused: _Optional[_Mapping[str, str]] = ..., policy: _Optional[str] = ...) -> None: ...
