"""proto/podresources/v1 is kubelet's wire contract: package, service, method paths, and every
field's name, number and type as in k8s.io/kubelet/pkg/apis/podresources/v1/api.proto. A
renumbered field would still compile and then decode kubelet's answers as garbage."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor

from dsan.api.gen.podresources_v1 import podresources_pb2 as pb

S, I64, U64, M = (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_INT64,
                  FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_MESSAGE)
#: message -> {field: (number, type, repeated)}, transcribed from kubelet's api.proto.
KUBELET = {
    "AllocatableResourcesRequest": {},
    "AllocatableResourcesResponse": {"devices": (1, M, True), "cpu_ids": (2, I64, True),
                                     "memory": (3, M, True)},
    "ListPodResourcesRequest": {},
    "ListPodResourcesResponse": {"pod_resources": (1, M, True)},
    "PodResources": {"name": (1, S, False), "namespace": (2, S, False),
                     "containers": (3, M, True)},
    "ContainerResources": {"name": (1, S, False), "devices": (2, M, True),
                           "cpu_ids": (3, I64, True), "memory": (4, M, True),
                           "dynamic_resources": (5, M, True)},
    "ContainerMemory": {"memory_type": (1, S, False), "size": (2, U64, False),
                        "topology": (3, M, False)},
    "ContainerDevices": {"resource_name": (1, S, False), "device_ids": (2, S, True),
                         "topology": (3, M, False)},
    "TopologyInfo": {"nodes": (1, M, True)},
    "NUMANode": {"ID": (1, I64, False)},
    "DynamicResource": {"claim_name": (2, S, False), "claim_namespace": (3, S, False),
                        "claim_resources": (4, M, True)},
    "ClaimResource": {"cdi_devices": (1, M, True), "driver_name": (2, S, False),
                      "pool_name": (3, S, False), "device_name": (4, S, False)},
    "CDIDevice": {"name": (1, S, False)},
    "GetPodResourcesRequest": {"pod_name": (1, S, False), "pod_namespace": (2, S, False)},
    "GetPodResourcesResponse": {"pod_resources": (1, M, False)},
}


def test_package_service_and_method_paths_are_kubelets() -> None:
    assert pb.DESCRIPTOR.package == "v1"
    svc = pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert svc.full_name == "v1.PodResourcesLister"
    assert {m.name: (m.input_type.name, m.output_type.name) for m in svc.methods} == {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
        "GetAllocatableResources": ("AllocatableResourcesRequest",
                                    "AllocatableResourcesResponse"),
        "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
    }


def test_every_field_number_and_type_is_kubelets() -> None:
    assert set(pb.DESCRIPTOR.message_types_by_name) == set(KUBELET)
    for name, want in KUBELET.items():
        msg = pb.DESCRIPTOR.message_types_by_name[name]
        got = {f.name: (f.number, f.type, f.is_repeated)
               for f in msg.fields}
        assert got == want, name
