"""`cleave partition --mode size_based` against torch.fx's Partitioner (PyTorch 2.11).

The modules of PyTorch's own partitioner tests (test_fx_experimental.py: find_single_partition,
size_based_partition, partition_device_mapping) and graphs.py families, with device sets that force
one partition, several, and single-node partitions: the partitions must have the same callable
nodes, used_mem_bytes and logical device ids, in the same order. Errors (not enough memory, a node
larger than every device) must be refused with one-line messages.
"""
import json
import os
import sys

import torch
from torch.fx import symbolic_trace
from torch.fx.experimental.accelerator_partitioner import Partitioner
from torch.fx.experimental.partitioner_utils import (Device, NodeLatency, PartitionerConfig, PartitionMode,
                                                     get_latency_of_partitioned_graph,
                                                     get_partition_to_latency_mapping)
from torch.fx.passes import graph_manipulation
from torch.fx.passes.tools_common import CALLABLE_NODE_OPS

from testlib import SOURCE_DIR, TempDirTest, main, run

sys.path.insert(0, os.path.join(SOURCE_DIR, "tools"))
import cleave_fx  # noqa: E402


class AddModule(torch.nn.Module):
    def forward(self, a, b):
        return a + b


class LinearModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.c = torch.rand(4)

    def forward(self, a, b):
        add_1 = a + b
        linear = self.linear(add_1)
        return linear + self.c


class MappingModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, a):
        b = torch.rand(4)
        add_1 = a + b
        linear_1 = self.linear(add_1)
        add_2 = torch.rand(4) + a
        return add_2 + linear_1


class LatencyModule(torch.nn.Module):
    """The module of PyTorch's test_partition_latency."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, a):
        add_1 = a + torch.rand(4)
        add_2 = add_1 + torch.rand(4)
        linear_1 = self.linear(add_1)
        add_3 = add_2 + linear_1
        add_4 = add_2 + add_3
        return add_4


class CostAwareModule(torch.nn.Module):
    """The module of PyTorch's test_cost_aware_partition."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, a):
        add_1 = a + torch.rand(4)
        add_2 = add_1 + torch.rand(4)
        linear_1 = self.linear(add_1)
        add_3 = add_2 + torch.rand(4)
        add_4 = add_2 + linear_1
        add_5 = add_3 + add_4
        return add_5


class KlModule(torch.nn.Module):
    """The module of PyTorch's test_kl_based_partition."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.b = torch.rand(4)
        self.c = torch.rand(4)
        self.d = torch.rand(4)

    def forward(self, a):
        add_1 = a + self.b
        add_2 = add_1 + self.c
        linear_1 = self.linear(add_1)
        add_3 = add_2 + linear_1
        add_4 = add_2 + self.d
        add_5 = add_3 + add_4
        return add_4


class AotModule(torch.nn.Module):
    """The module of PyTorch's test_aot_based_partition."""

    def __init__(self):
        super().__init__()
        self.b = torch.rand(4)
        self.c = torch.rand(4)

    def forward(self, a):
        add_1 = a + self.b
        return self.c + add_1


class RecommendationModule(torch.nn.Module):
    """The module of PyTorch's test_sparse_nn_partition: MLPs around five EmbeddingBag tables."""

    @staticmethod
    def mlp(layers, width_in, width_out):
        modules = torch.nn.ModuleList()
        for _ in range(layers):
            modules.append(torch.nn.Linear(width_in, width_out))
            modules.append(torch.nn.ReLU())
        return modules

    def __init__(self):
        super().__init__()
        self.bottom_layers = torch.nn.Sequential(*self.mlp(4, 4, 4))
        self.top_layers = torch.nn.Sequential(*self.mlp(3, 24, 24))
        self.embedding_layers = torch.nn.ModuleList()
        for rows in (500000, 1000000, 1000000, 1000000, 500000):
            self.embedding_layers.append(torch.nn.EmbeddingBag(rows, 4, mode="sum", sparse=True))

    def forward(self, a, b, offset):
        x = self.bottom_layers(a)
        y, c = [], []
        for i in range(len(self.embedding_layers)):
            c.append(torch.randint(10, (8,)) + b)
        for i in range(len(self.embedding_layers)):
            if i % 2 == 0:
                y.append(self.embedding_layers[i](c[i], offset))
            else:
                y.append(self.embedding_layers[i](torch.randint(10, (8,)), offset))
        return self.top_layers(torch.cat([x] + y, dim=1))


def latency_rule(gm):
    """PyTorch's test rule: (total, 2 x total) when a node has no weights, else (total, output)."""
    latencies = {}
    for node in gm.graph.nodes:
        if node.op not in {"output", "placeholder", "get_attr"}:
            total, out = node.size_bytes.total_size, node.size_bytes.output_size
            latencies[node] = NodeLatency(total, 2.0 * total) if total == out else NodeLatency(total, out)
    return latencies


def cost_aware_test_rule(gm):
    """test_cost_aware_partition's rule: (total, 1) when a node has no weights, else (total, output)."""
    latencies = {}
    for node in gm.graph.nodes:
        if node.op not in {"output", "placeholder", "get_attr"}:
            total, out = node.size_bytes.total_size, node.size_bytes.output_size
            latencies[node] = NodeLatency(total, 1) if total == out else NodeLatency(total, out)
    return latencies


def reference(gm, inputs, devices):
    graph_manipulation.get_size_of_all_nodes(gm, inputs)
    partitioner = Partitioner()
    config = PartitionerConfig([Device(f"dev_{i}", mem, i) for i, mem in enumerate(devices)], PartitionMode.size_based)
    partitioner.partition_graph(gm, gm, config)
    return [(sorted(n.name for n in p.nodes if n.op in CALLABLE_NODE_OPS), p.used_mem_bytes, p.logical_device_ids)
            for p in partitioner.partitions]


class Conformance(TempDirTest):
    def cleave(self, gm, inputs, devices, name):
        fx_path, dev_path = self.path(f"{name}.fx.json"), self.path(f"{name}.devices.json")
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, fx_path)
        with open(dev_path, "w") as f:
            json.dump({"devices": [{"name": f"dev_{i}", "logical_id": i, "available_mem_bytes": m}
                                   for i, m in enumerate(devices)]}, f)
        return run("partition", fx_path, "--devices", dev_path, "--json")

    def compare(self, gm, inputs, devices, name):
        expected = reference(gm, inputs, devices)
        code, out, err = self.cleave(gm, inputs, devices, name)
        self.assertEqual(code, 0, err)
        actual = [(sorted(p["nodes"]), p["size_bytes"], p["logical_device_ids"]) for p in json.loads(out)["partitions"]]
        self.assertEqual(actual, expected)
        return expected

    def test_single_partition_on_the_largest_device(self):
        torch.manual_seed(0)
        gm = symbolic_trace(AddModule())
        parts = self.compare(gm, (torch.rand(4), torch.rand(4)), [125, 150, 125], "single")
        self.assertEqual(len(parts), 1)
        self.assertEqual(parts[0][2], [1])

    def test_size_based_three_devices(self):
        torch.manual_seed(0)
        gm = symbolic_trace(LinearModule())
        parts = self.compare(gm, (torch.rand(4), torch.rand(4)), [125, 125, 125], "size_based")
        self.assertEqual([p[1] for p in parts], [48, 112, 48])
        self.assertEqual([p[2] for p in parts], [[0], [1], [2]])

    def test_device_mapping_of_single_node_partitions(self):
        torch.manual_seed(0)
        gm = symbolic_trace(MappingModule())
        parts = self.compare(gm, (torch.rand(4),), [120, 160], "mapping")
        self.assertEqual([p[2] for p in parts], [[0], [1], [0]])

    def test_graph_families(self):
        graphs = cleave_fx._reference_graphs()
        cases = 0
        succeeded = 0
        # Device sets found by scanning torch's results: several partitions, single-node partitions
        # mapped onto devices, and refusals.
        for family, size, devices in (("chain", 8, [3600] * 6), ("chain", 8, [16600] * 4),
                                      ("linear_chain", 6, [5800] * 6), ("linear_chain", 6, [31900] * 4),
                                      ("diamonds", 5, [700] * 6), ("diamonds", 5, [2700] * 4),
                                      ("wide", 6, [400] * 4), ("wide", 6, [500] * 3), ("wide", 6, [900] * 6),
                                      ("chain", 8, [3000] * 4), ("linear_chain", 6, [9000] * 4)):
            torch.manual_seed(0)
            gm, inputs = graphs.FAMILIES[family](size)
            with self.subTest(family=family, devices=devices):
                try:
                    expected = reference(gm, inputs, devices)
                except RuntimeError as e:
                    code, _, err = self.cleave(gm, inputs, devices, f"{family}_{cases}")
                    self.assertEqual(code, 1, f"torch refused ({e}) but cleave did not")
                    cases += 1
                    continue
                code, out, err = self.cleave(gm, inputs, devices, f"{family}_{cases}")
                self.assertEqual(code, 0, err)
                actual = [(sorted(p["nodes"]), p["size_bytes"], p["logical_device_ids"])
                          for p in json.loads(out)["partitions"]]
                self.assertEqual(actual, expected)
                self.assertGreater(len(actual), 1)
                succeeded += 1
                cases += 1
        self.assertEqual(cases, 11)
        self.assertEqual(succeeded, 9)

    def check_latency(self, gm, inputs, devices, rate, name):
        graph_manipulation.get_size_of_all_nodes(gm, inputs)
        partitioner = Partitioner()
        config = PartitionerConfig([Device(f"dev_{i}", m, i) for i, m in enumerate(devices)], PartitionMode.size_based)
        partitioner.partition_graph(gm, gm, config)
        latencies = latency_rule(gm)
        mapping = get_partition_to_latency_mapping(partitioner.partitions, latencies)
        expected = get_latency_of_partitioned_graph(partitioner.partitions, mapping, rate)
        latency_path = self.path(f"{name}.latency.json")
        with open(latency_path, "w") as f:
            json.dump({n.name: {"mem_latency_sec": l.mem_latency_sec, "computer_latency_sec": l.computer_latency_sec}
                       for n, l in latencies.items()}, f)
        fx_path, dev_path = self.path(f"{name}.fx.json"), self.path(f"{name}.devices.json")
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, fx_path)
        with open(dev_path, "w") as f:
            json.dump({"devices": [{"logical_id": i, "available_mem_bytes": m} for i, m in enumerate(devices)]}, f)
        code, out, err = run("partition", fx_path, "--devices", dev_path, "--latency", latency_path,
                             "--transfer-rate", rate, "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        self.assertAlmostEqual(summary["critical_path"], expected)
        self.assertEqual([p["latency_sec"]["overall"] for p in summary["partitions"]],
                         [mapping[p].overall_latency_sec for p in partitioner.partitions])
        return expected

    def test_partition_latency_as_pytorch_tests_it(self):
        torch.manual_seed(0)
        gm = symbolic_trace(LatencyModule())
        # Two partitions (two 180-byte devices): PyTorch's test value, 208 at rate 2.
        self.assertEqual(self.check_latency(gm, (torch.rand(4),), [180, 180], 2.0, "latency"), 208.0)
        gm = symbolic_trace(LatencyModule())
        self.assertEqual(self.check_latency(gm, (torch.rand(4),), [125, 125, 125], 2.0, "latency3"), 240.0)

    def test_critical_path_on_graph_families(self):
        graphs = cleave_fx._reference_graphs()
        for family, size, devices in (("chain", 8, [3600] * 6), ("diamonds", 5, [700] * 6), ("wide", 6, [400] * 4),
                                      ("linear_chain", 6, [5800] * 6)):
            torch.manual_seed(0)
            gm, inputs = graphs.FAMILIES[family](size)
            with self.subTest(family=family):
                self.assertGreater(self.check_latency(gm, inputs, devices, 3.0, family), 0.0)

    def test_saturate_host_as_pytorch_tests_it(self):
        torch.manual_seed(0)
        gm = symbolic_trace(LatencyModule())
        inputs = (torch.rand(4),)
        devices = [200, 200, 100, 100, 200, 100]
        graph_manipulation.get_size_of_all_nodes(gm, inputs)
        partitioner = Partitioner()
        config = PartitionerConfig([Device(f"dev_{i}", m, i) for i, m in enumerate(devices)], saturate_host=True)
        import contextlib, io
        with contextlib.redirect_stdout(io.StringIO()):
            partitioner.partition_graph(gm, gm, config)
        expected = [p.logical_device_ids for p in partitioner.partitions]
        self.assertEqual(expected, [[0, 4], [1, 2]])
        fx_path, dev_path = self.path("sat.fx.json"), self.path("sat.devices.json")
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, fx_path)
        with open(dev_path, "w") as f:
            json.dump({"devices": [{"logical_id": i, "available_mem_bytes": m} for i, m in enumerate(devices)]}, f)
        code, out, err = run("partition", fx_path, "--devices", dev_path, "--saturate-host", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual([p["logical_device_ids"] for p in json.loads(out)["partitions"]], expected)

    def test_aot_based_as_pytorch_tests_it(self):
        torch.manual_seed(0)
        gm = symbolic_trace(AotModule())
        inputs = (torch.rand(4),)
        graph_manipulation.get_size_of_all_nodes(gm, inputs)
        node_to_partition, partition_to_devices = {}, {}
        for node in gm.graph.nodes:
            if node.op not in {"placeholder", "get_attr", "output"}:
                node_to_partition[node] = len(partition_to_devices)
                partition_to_devices[len(partition_to_devices)] = [0]
        partitioner = Partitioner()
        config = PartitionerConfig([Device("dev_0", 200, 0)], mode=PartitionMode.aot_based,
                                   node_to_partition_mapping=node_to_partition,
                                   partition_to_logical_device_mapping=partition_to_devices)
        result = partitioner.partition_graph(gm, gm, config)
        expected = [(n.size_bytes, n.logical_device_ids) for n in result.dag.nodes]
        self.assertEqual(expected, [(48, [0]), (48, [0])])
        fx_path, dev_path, aot_path = self.path("aot.fx.json"), self.path("aot.devices.json"), self.path("aot.json")
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, fx_path)
        with open(dev_path, "w") as f:
            json.dump({"devices": [{"logical_id": 0, "available_mem_bytes": 200}]}, f)
        with open(aot_path, "w") as f:
            json.dump({"node_to_partition": {n.name: p for n, p in node_to_partition.items()},
                       "partition_to_logical_devices": {str(p): d for p, d in partition_to_devices.items()}}, f)
        code, out, err = run("partition", fx_path, "--devices", dev_path, "--mode", "aot_based", "--aot", aot_path,
                             "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual([(p["size_bytes"], p["logical_device_ids"]) for p in json.loads(out)["partitions"]], expected)
        # A mapping naming a node the model lacks is refused.
        with open(aot_path, "w") as f:
            json.dump({"node_to_partition": {"ghost": 0}, "partition_to_logical_devices": {"0": [0]}}, f)
        code, _, err = run("partition", fx_path, "--devices", dev_path, "--mode", "aot_based", "--aot", aot_path)
        self.assertOneLineError(code, err, "'ghost'")

    def test_sparse_nn_as_pytorch_tests_it(self):
        torch.manual_seed(0)
        gm = symbolic_trace(RecommendationModule())
        inputs = (torch.rand(2, 4), torch.randint(10, (8,)), torch.tensor([0, 4]))
        devices = [33000000, 33000000, 33000000]
        graph_manipulation.get_size_of_all_nodes(gm, inputs)
        partitioner = Partitioner()
        config = PartitionerConfig([Device(f"dev_{i}", m, i) for i, m in enumerate(devices)], PartitionMode.sparse_nn)
        partitioner.partition_graph(gm, gm, config)
        expected = sorted((sorted(n.name for n in p.nodes if n.op in CALLABLE_NODE_OPS), p.used_mem_bytes,
                           p.logical_device_ids) for p in partitioner.partitions)
        fx_path, dev_path = self.path("snn.fx.json"), self.path("snn.devices.json")
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, fx_path)
        with open(dev_path, "w") as f:
            json.dump({"devices": [{"logical_id": i, "available_mem_bytes": m} for i, m in enumerate(devices)]}, f)
        code, out, err = run("partition", fx_path, "--devices", dev_path, "--mode", "sparse_nn", "--json")
        self.assertEqual(code, 0, err)
        actual = sorted((sorted(p["nodes"]), p["size_bytes"], p["logical_device_ids"])
                        for p in json.loads(out)["partitions"])
        self.assertEqual(actual, expected)
        self.assertGreaterEqual(len(actual), 3)

    def run_cost_mode(self, gm, inputs, devices, latencies, rate, mode, name):
        """torch's partitions and critical path for `mode`, and cleave's on the FX export."""
        partitioner = Partitioner()
        config = PartitionerConfig([Device(f"dev_{i}", m, i) for i, m in enumerate(devices)], PartitionMode[mode],
                                   transfer_rate_bytes_per_sec=rate, node_to_latency_mapping=latencies)
        import contextlib, io
        with contextlib.redirect_stdout(io.StringIO()):
            result = partitioner.partition_graph(gm, gm, config)
        mapping = get_partition_to_latency_mapping(partitioner.partitions, latencies)
        expected_cost = get_latency_of_partitioned_graph(partitioner.partitions, mapping, rate)
        expected = [(sorted(n.name for n in p.nodes if n.op in CALLABLE_NODE_OPS), p.used_mem_bytes,
                     p.logical_device_ids) for p in partitioner.partitions]
        fx_path, dev_path, lat_path = (self.path(f"{name}.fx.json"), self.path(f"{name}.devices.json"),
                                       self.path(f"{name}.latency.json"))
        with torch.no_grad():
            cleave_fx.export_graph(gm, inputs, fx_path)
        with open(dev_path, "w") as f:
            json.dump({"devices": [{"logical_id": i, "available_mem_bytes": m} for i, m in enumerate(devices)]}, f)
        with open(lat_path, "w") as f:
            json.dump({n.name: {"mem_latency_sec": l.mem_latency_sec, "computer_latency_sec": l.computer_latency_sec}
                       for n, l in latencies.items()}, f)
        code, out, err = run("partition", fx_path, "--devices", dev_path, "--mode", mode, "--latency", lat_path,
                             "--transfer-rate", rate, "--json")
        self.assertEqual(code, 0, err)
        summary = json.loads(out)
        actual = [(sorted(p["nodes"]), p["size_bytes"], p["logical_device_ids"]) for p in summary["partitions"]]
        return expected, expected_cost, actual, summary["critical_path"], [n.size_bytes for n in result.dag.nodes]

    def test_cost_aware_as_pytorch_tests_it(self):
        torch.manual_seed(0)
        gm = symbolic_trace(CostAwareModule())
        inputs = (torch.rand(4),)
        graph_manipulation.get_size_of_all_nodes(gm, inputs)
        expected, expected_cost, actual, cost, _ = self.run_cost_mode(
            gm, inputs, [125] * 4, cost_aware_test_rule(gm), 2.0, "cost_aware", "cost_aware")
        self.assertEqual(expected_cost, 160)  # PyTorch's test value
        self.assertEqual(cost, 160)
        self.assertEqual(actual, expected)

    def test_kl_based_as_pytorch_tests_it(self):
        torch.manual_seed(0)
        gm = symbolic_trace(KlModule())
        inputs = (torch.rand(4),)
        graph_manipulation.get_size_of_all_nodes(gm, inputs)
        expected, expected_cost, actual, cost, dag_sizes = self.run_cost_mode(
            gm, inputs, [200] * 4, latency_rule(gm), 2.0, "kl_based", "kl")
        self.assertEqual((expected_cost, dag_sizes), (208, [176, 112]))  # PyTorch's test values
        self.assertEqual(cost, 208)
        self.assertEqual([p[1] for p in actual], [176, 112])
        self.assertEqual(actual, expected)

    def test_cost_modes_on_graph_families_are_as_good_as_pytorch(self):
        """time_partitioner.py's set-up: 4 devices of total/4 + total/8, NodeLatency(1, 2), 1e9 B/s."""
        graphs = cleave_fx._reference_graphs()
        for family, size in (("linear_chain", 8), ("diamonds", 4), ("chain", 6)):
            for mode in ("cost_aware", "kl_based"):
                with self.subTest(family=family, mode=mode):
                    torch.manual_seed(0)
                    gm, inputs = graphs.FAMILIES[family](size)
                    graph_manipulation.get_size_of_all_nodes(gm, inputs)
                    total = sum(n.size_bytes.total_size for n in gm.graph.nodes if n.op != "output")
                    latencies = {n: NodeLatency(1.0, 2.0) for n in gm.graph.nodes
                                 if n.op not in {"placeholder", "output", "get_attr"}}
                    _, expected_cost, actual, cost, _ = self.run_cost_mode(
                        gm, inputs, [total // 4 + total // 8] * 4, latencies, 1e9, mode, f"{family}_{mode}")
                    self.assertLessEqual(cost, expected_cost + 1e-9)
                    self.assertGreater(len(actual), 1)

    def test_not_enough_memory_is_refused(self):
        gm = symbolic_trace(LinearModule())
        code, _, err = self.cleave(gm, (torch.rand(4), torch.rand(4)), [40, 40], "short")
        self.assertOneLineError(code, err, "short")

    def test_a_node_larger_than_every_device_is_named(self):
        gm = symbolic_trace(LinearModule())
        code, _, err = self.cleave(gm, (torch.rand(4), torch.rand(4)), [100, 100, 100], "large")
        self.assertOneLineError(code, err, "'linear'")


if __name__ == "__main__":
    main()
