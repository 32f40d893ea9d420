"""The distributed runner end to end: `cleave launch` starts ranks that run a cut model on c10d
(TCPStore + ProcessGroupGloo) with `cleave run PLAN --distributed`. Outputs must equal the
single-process microbatched run byte for byte (same thread count), including an uneven last
microbatch and a skip connection that jumps a stage; split and partition plans run the same way. Training a
pipeline plan (`cleave train PLAN`, in one process and on 2 and 3 ranks) follows the whole model's
training, tied weights included. Faults: a missing or inconsistent environment, a rank that
fails, a peer that never comes. Two hosts: two network namespaces joined by a veth pair, each with
its own address and no other route, run one world with a launcher each; a rank killed on one host
is named by the other's error, and a host cut off ends the run within the timeout."""
import json
import os
import re
import subprocess
import time
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from testlib import CLEAVE, EXAMPLES, TempDirTest, free_port, launch, main, run

os.environ["OMP_NUM_THREADS"] = "1"  # the single-process runs and every rank: one intra-op thread


class TwoHosts:
    """Two test hosts on this machine: network namespaces `<name>a` and `<name>b`, each holding one
    end of a veth pair, addressed 198.18.0.1 and 198.18.0.2 (RFC 2544's benchmarking range), with
    loopback up and no other interface: traffic between them crosses the veth link and nothing
    leaves the pair. Needs root (CI and the development machines run as root)."""
    ADDRESSES = ("198.18.0.1", "198.18.0.2")
    count = 0

    def __init__(self):
        TwoHosts.count += 1
        self.name = f"clv{os.getpid() % 100000}n{TwoHosts.count}"  # interface names: 15 characters at most
        self.hosts = (self.name + "a", self.name + "b")

    def __enter__(self):
        def ip(*args):
            subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)
        try:
            for host in self.hosts:
                ip("netns", "add", host)
            ip("link", "add", self.hosts[0], "type", "veth", "peer", "name", self.hosts[1])
            for host, address in zip(self.hosts, self.ADDRESSES):
                ip("link", "set", host, "netns", host)
                ip("-n", host, "addr", "add", address + "/30", "dev", host)
                ip("-n", host, "link", "set", "lo", "up")
                ip("-n", host, "link", "set", host, "up")
        except (OSError, subprocess.CalledProcessError) as e:
            self.__exit__(None, None, None)
            detail = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
            raise unittest.SkipTest(f"network namespaces unavailable here ({detail}): needs root and iproute2")
        return self

    def __exit__(self, *exc):
        for host in self.hosts:  # deleting a namespace deletes its end of the pair, and so the pair
            for pid in self.pids(host):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", host], capture_output=True, timeout=30)

    @staticmethod
    def pids(host):
        out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def launch(self, node, nproc, *command, timeout=10):
        """One launcher per host: `cleave launch` on host `node`, master on host 0."""
        argv = ["ip", "netns", "exec", self.hosts[node], CLEAVE, "launch", "--nproc", str(nproc), "--nnodes", "2",
                "--node-rank", str(node), "--master-addr", self.ADDRESSES[0], "--master-port", "29500",
                "--timeout", str(timeout), "--", *map(str, command)]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def rank_pid(self, node, rank):
        for pid in self.pids(self.hosts[node]):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    variables = f.read().split(b"\0")
            except OSError:
                continue
            if f"RANK={rank}".encode() in variables and b"LOCAL_RANK" in b" ".join(variables):
                return pid
        raise AssertionError(f"no rank {rank} on host {node}")

    def link_bytes(self, node):
        out = subprocess.run(["ip", "netns", "exec", self.hosts[node], "cat",
                              f"/sys/class/net/{self.hosts[node]}/statistics/tx_bytes"],
                             capture_output=True, text=True, check=True).stdout
        return int(out)


class Distributed(TempDirTest):
    def mlp_with_skip(self, rows="N"):
        """x [N, 8] -> 4 Linear+Relu blocks; block 3 adds block 0's output back (a skip over stages).
        rows: a static batch instead (every value type then says that many rows)."""
        rng = np.random.default_rng(2)
        inits, nodes, h = [], [], "x"
        for k in range(4):
            inits += [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{k}"),
                      numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), f"b{k}")]
            nodes += [helper.make_node("MatMul", [h, f"w{k}"], [f"m{k}"]), helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"])]
            if k == 3:
                nodes.append(helper.make_node("Add", ["a3", "h0"], ["s3"]))
            nodes.append(helper.make_node("Tanh" if k == 3 else "Relu", ["s3" if k == 3 else f"a{k}"], [f"h{k}"]))
            h = f"h{k}"
        graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 8])],
                                  [helper.make_tensor_value_info("h3", TensorProto.FLOAT, [rows, 8])], inits)
        path = self.path(f"mlp_{rows}.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        return path

    def check_timeline(self, actions, ranks, stages, microbatches, split):
        """`--timing`'s measured timeline: every stage's F and B (or I and W) of every microbatch
        once, on the stage's rank, each rank's actions one after another, waits inside them."""
        kinds = "FIW" if split else "FB"
        want = sorted(f"{s}{k}{m}" for s in range(stages) for k in kinds for m in range(microbatches))
        self.assertEqual(sorted(a["action"] for a in actions), want)
        for a in actions:
            self.assertEqual(a["rank"], int(a["action"][0]) % ranks, a)
            self.assertLessEqual(a["start_s"], a["end_s"], a)
            self.assertLessEqual(a["wait_s"], a["end_s"] - a["start_s"] + 1e-9, a)
            self.assertGreater(a["compute_s"], 0.0, a)  # inside the action, besides its wait
            self.assertLessEqual(a["compute_s"] + a["wait_s"], a["end_s"] - a["start_s"] + 1e-9, a)
        for rank in range(ranks):
            own = [a for a in actions if a["rank"] == rank]
            for before, after in zip(own, own[1:]):
                self.assertLessEqual(before["end_s"], after["start_s"] + 1e-9, (before, after))

    def check_transport_timing(self, steps, plan, ranks, microbatches):
        """`--timing`'s per-rank receives and transport CPU: each rank receives, every step, one
        message per microbatch for each value a stage on another rank makes for one of its stages
        (forward), and one per floating value one of its stages makes for another rank (its
        gradient); the transport's threads run some CPU on every rank that receives."""
        with open(os.path.join(plan, "plan.json")) as f:
            text = json.load(f)
        floating = {v["name"] for v in text["values"] if v.get("dtype", "").startswith(("f", "bf"))}
        producer = {out: i for i, sub in enumerate(text["submodules"]) for out in sub["outputs"]}
        want = [0] * ranks
        for reader, sub in enumerate(text["submodules"]):
            for value in {i["value"] for i in sub["inputs"]}:
                made = producer.get(value)
                if made is None or made % ranks == reader % ranks:
                    continue
                want[reader % ranks] += microbatches
                if value in floating:
                    want[made % ranks] += microbatches
        for step in steps:
            self.assertEqual(step["rank_receives"], want)
            self.assertEqual(len(step["rank_transport_cpu_s"]), ranks)
            self.assertTrue(all(0.0 <= t < step["seconds"] * 4 for t in step["rank_transport_cpu_s"]), step)
        for rank in range(ranks):  # over the steps: reading the messages took the I/O thread some time
            if want[rank]:
                self.assertGreater(sum(s["rank_transport_cpu_s"][rank] for s in steps), 0.0)

    def test_pipeline_ranks_match_the_single_process_run(self):
        model = self.mlp_with_skip()
        plan = self.path("plan")
        run("pipeline", model, "--stages", 3, "-o", plan, check=True)
        np.savez(self.path("x.npz"), x=np.random.default_rng(1).standard_normal((7, 8)).astype(np.float32))
        for microbatches in (1, 3):  # 7 rows in 3 microbatches: 3, 3, 1
            single = self.path(f"single{microbatches}.npz")
            run("run", plan, "--pipeline", "--microbatches", microbatches, "--inputs", self.path("x.npz"),
                "--save-outputs", single, check=True)
            for nproc in (3, 2):  # 2 ranks: stages 0 and 2 share rank 0
                with self.subTest(microbatches=microbatches, nproc=nproc):
                    got = self.path(f"dist{microbatches}_{nproc}.npz")
                    code, out, err = launch(nproc, "cleave", "run", plan, "--distributed", "--microbatches",
                                            microbatches, "--inputs", self.path("x.npz"), "--save-outputs", got)
                    self.assertEqual(code, 0, err)
                    with open(single, "rb") as a, open(got, "rb") as b:
                        self.assertEqual(a.read(), b.read())
                    self.assertIn("[rank 0] h3: f32[7,8]", out)
                    self.assertIn("[rank 1] rank 1 of", err)
                    # Every boundary's shape is in the plan ([N, 8], N bound by x's rows): no
                    # message carries a shape header, uneven microbatches included.
                    self.assertEqual(err.count("(0 shape header(s) sent)"), nproc, err)
        whole = self.path("whole.npz")
        run("run", model, "--inputs", self.path("x.npz"), "--save-outputs", whole, check=True)
        # Up to float rounding: 7 rows run the product primitive, microbatches of at most 4 rows run
        # sgemm (runtime/cpu/onednn.h), whose sums round differently by a few ulps.
        np.testing.assert_allclose(np.load(whole)["h3"], np.load(self.path("dist3_3.npz"))["h3"], rtol=1e-5, atol=1e-5)
        # In a schedule's order (its forwards): the same bytes. Interleaved puts stages 0 and 2 on
        # rank 0, which runs several microbatches through stage 0 before stage 2.
        four = self.path("four")
        run("pipeline", model, "--stages", 4, "-o", four, check=True)
        for plan_dir, nproc, kind in ((plan, 3, "1f1b"), (four, 2, "interleaved"), (four, 2, "looped_bfs")):
            with self.subTest(schedule=kind):
                single, got = self.path(f"single_{kind}.npz"), self.path(f"dist_{kind}.npz")
                args = ["--microbatches", 4, "--inputs", self.path("x.npz"), "--save-outputs"]
                run("run", plan_dir, "--pipeline", *args, single, check=True)
                code, out, err = launch(nproc, "cleave", "run", plan_dir, "--distributed", "--schedule", kind, *args, got)
                self.assertEqual(code, 0, err)
                with open(single, "rb") as a, open(got, "rb") as b:
                    self.assertEqual(a.read(), b.read())
        code, _, err = launch(2, "cleave", "run", plan, "--distributed", "--schedule", "1f1b", "--microbatches", 2,
                              "--inputs", self.path("x.npz"))
        self.assertEqual(code, 1, err)  # the launcher's exit; the ranks' was 2 (usage), before connecting
        self.assertIn("exited with status 2: cleave run: usage error: --schedule 1f1b: 3 stages do not divide "
                      "over 2 ranks", err)
        code, _, err = run("run", plan, "--pipeline", "--schedule", "1f1b", "--inputs", self.path("x.npz"))
        self.assertOneLineError(code, err, "--schedule goes with --distributed", exit_code=2)

    def test_a_static_batch_export_runs_in_microbatches_across_ranks(self):
        # The plan's value types say 7 rows; microbatches of 3, 3 and 1 rows cannot take their
        # message shapes from it (issue 41): each key's first message carries its shape.
        model = self.mlp_with_skip(rows=7)
        plan = self.path("static_plan")
        run("pipeline", model, "--stages", 3, "--microbatches", 3, "-o", plan, check=True)
        np.savez(self.path("x.npz"), x=np.random.default_rng(1).standard_normal((7, 8)).astype(np.float32))
        single = self.path("static_single.npz")
        run("run", plan, "--pipeline", "--microbatches", 3, "--inputs", self.path("x.npz"), "--save-outputs", single,
            check=True)
        for nproc in (3, 2):
            with self.subTest(nproc=nproc):
                got = self.path(f"static_dist{nproc}.npz")
                code, out, err = launch(nproc, "cleave", "run", plan, "--distributed", "--microbatches", 3,
                                        "--inputs", self.path("x.npz"), "--save-outputs", got)
                self.assertEqual(code, 0, err)
                with open(single, "rb") as a, open(got, "rb") as b:
                    self.assertEqual(a.read(), b.read())
                self.assertNotIn("(0 shape header(s) sent)", err)  # learned, not declared
        whole = self.path("static_whole.npz")
        run("run", model, "--inputs", self.path("x.npz"), "--save-outputs", whole, check=True)
        np.testing.assert_allclose(np.load(whole)["h3"], np.load(single)["h3"], rtol=1e-5, atol=1e-5)

    def test_two_launchers_are_two_nodes(self):
        """`--nnodes 2`: one launcher per node (here both on loopback), 2 ranks each; the 4 ranks run a
        4-stage plan as one world, the same bytes as one process."""
        model = self.mlp_with_skip()
        plan = self.path("plan")
        run("pipeline", model, "--stages", 4, "-o", plan, check=True)
        np.savez(self.path("x.npz"), x=np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32))
        args = ["--microbatches", 4, "--inputs", self.path("x.npz"), "--save-outputs"]
        run("run", plan, "--pipeline", *args, self.path("single.npz"), check=True)
        port = free_port()
        nodes = [subprocess.Popen([CLEAVE, "launch", "--nproc", "2", "--nnodes", "2", "--node-rank", str(node),
                                   "--master-addr", "127.0.0.1", "--master-port", str(port), "--timeout", "30", "--",
                                   "cleave", "run", plan, "--distributed", "--schedule", "1f1b",
                                   *map(str, args), self.path("dist.npz")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for node in (0, 1)]
        results = [node.communicate(timeout=90) for node in nodes]
        for node, (out, err) in zip(nodes, results):
            self.assertEqual(node.returncode, 0, err)
        self.assertIn("[rank 3] rank 3 of 4: ran stage_3", results[1][1])
        self.assertIn("[rank 0] rank 0 of 4: ran stage_0", results[0][1])
        with open(self.path("single.npz"), "rb") as a, open(self.path("dist.npz"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def mlp_with_loss(self, rows=64):
        """x [N, 8] -> 4 Linear+Relu blocks -> mean squared error against y; and data.npz."""
        rng = np.random.default_rng(4)
        inits, nodes, h = [], [], "x"
        for k in range(4):
            inits += [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{k}"),
                      numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), f"b{k}")]
            nodes += [helper.make_node("MatMul", [h, f"w{k}"], [f"m{k}"]),
                      helper.make_node("Add", [f"m{k}", f"b{k}"], [f"a{k}"]), helper.make_node("Relu", [f"a{k}"], [f"h{k}"])]
            h = f"h{k}"
        nodes += [helper.make_node("Sub", [h, "y"], ["d"]), helper.make_node("Mul", ["d", "d"], ["dd"]),
                  helper.make_node("ReduceMean", ["dd"], ["loss"], keepdims=0)]
        graph = helper.make_graph(nodes, "mlp_mse", [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 8])
                                                     for n in ("x", "y")],
                                  [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
        path = self.path("mlp_mse.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
        np.savez(self.path("data.npz"), x=rng.standard_normal((rows, 8)).astype(np.float32),
                 y=rng.standard_normal((rows, 8)).astype(np.float32))
        return path

    def test_two_hosts_on_their_own_network_compute_what_one_process_does(self):
        """Two launchers on two hosts (network namespaces), 2 ranks each, with no GLOO_SOCKET_IFNAME:
        each rank listens on its host's address toward the master (a rank that listened where its
        hostname resolves, Gloo's default, was unreachable from the other host). Inference and
        training give one process's bytes and losses, and the messages crossed the link."""
        model = self.mlp_with_skip()
        plan = self.path("plan")
        run("pipeline", model, "--stages", 4, "-o", plan, check=True)
        np.savez(self.path("x.npz"), x=np.random.default_rng(3).standard_normal((10, 8)).astype(np.float32))
        args = ["--microbatches", 4, "--inputs", self.path("x.npz"), "--save-outputs"]  # rows 3, 3, 3, 1
        run("run", plan, "--pipeline", *args, self.path("single.npz"), check=True)
        trained = self.mlp_with_loss()
        stages = self.path("stages")
        run("pipeline", trained, "--stages", 4, "-o", stages, check=True)
        common = ["--data", self.path("data.npz"), "--batch", 16, "--steps", 3, "--microbatches", 4,
                  "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--json"]
        code, local, err = run("train", stages, *common)
        self.assertEqual(code, 0, err)
        with TwoHosts() as hosts:
            before = [hosts.link_bytes(node) for node in (0, 1)]
            nodes = [hosts.launch(node, 2, "cleave", "run", plan, "--distributed", "--schedule", "1f1b", *args,
                                  self.path("dist.npz")) for node in (0, 1)]
            results = [node.communicate(timeout=90) for node in nodes]
            for node, (out, err) in zip(nodes, results):
                self.assertEqual(node.returncode, 0, err)
            self.assertIn("[rank 2] rank 2 of 4: ran stage_2", results[1][1])
            with open(self.path("single.npz"), "rb") as a, open(self.path("dist.npz"), "rb") as b:
                self.assertEqual(a.read(), b.read())
            # The ranks talked over the link: every microbatch crossed it both ways (rank 1 to 2,
            # and 3 back to 0 for the output), besides the rendezvous.
            sent = [hosts.link_bytes(node) - b for node, b in zip((0, 1), before)]
            self.assertGreater(min(sent), 10 * 8 * 4, sent)
            nodes = [hosts.launch(node, 2, "cleave", "train", stages, *common, "--schedule", "1f1b") for node in (0, 1)]
            results = [node.communicate(timeout=90) for node in nodes]
            for node, (out, err) in zip(nodes, results):
                self.assertEqual(node.returncode, 0, err)
            losses = lambda text: [json.loads(line.split("] ", 1)[-1])["loss"] for line in text.splitlines()]
            self.assertEqual(losses(results[0][0]), losses(local))
            self.assertEqual(len(losses(local)), 3)

    def start_endless_training(self, hosts, timeout):
        """A 4-stage plan trained in 1F1B order for as good as ever on both hosts, 2 ranks each;
        returns the two launchers once the first step is done."""
        self.mlp_with_loss()
        stages = self.path("stages")
        run("pipeline", self.path("mlp_mse.onnx"), "--stages", 4, "-o", stages, check=True)
        nodes = [hosts.launch(node, 2, "cleave", "train", stages, "--data", self.path("data.npz"), "--batch", 16,
                              "--steps", 100000, "--microbatches", 4, "--lr", "0.01", "--json", "--schedule", "1f1b",
                              timeout=timeout) for node in (0, 1)]
        self.assertIn('"step":1,', nodes[0].stdout.readline())  # training is under way
        return nodes

    def test_a_rank_killed_on_one_host_is_named_on_the_other(self):
        """Rank 3 (host 1) is killed mid-training: host 1's launcher names it and stops rank 2; host
        0's ranks, whose connections to host 1 close, fail at once naming rank 3's death (the
        launcher's announcement through the store), not only the peer they were waiting on."""
        with TwoHosts() as hosts:
            nodes = self.start_endless_training(hosts, timeout=60)
            killed = time.monotonic()
            os.kill(hosts.rank_pid(1, 3), 9)
            results = [node.communicate(timeout=90) for node in nodes]
            self.assertLess(time.monotonic() - killed, 20)  # far inside the 60 s timeout
            self.assertEqual([n.returncode for n in nodes], [1, 1], results)
            self.assertEqual(results[1][1].splitlines()[-1], "cleave launch: error: rank 3 died of signal Killed")
            last = results[0][1].splitlines()[-1]
            # A receive names where it waited (stage, action, microbatch, value, peer); a collective its step.
            self.assertRegex(last, r"^cleave launch: error: rank [01] exited with status 1: cleave train: error: "
                                   r"(stage '\w+', action \d+[FBIW]\d+ \(microbatch \d+\), receiving .* from rank \d: |"
                                   r"step \d+'s [^:]*: )?"
                                   r"rank [01]: .* failed after rank 3 died of signal Killed \(the run's first failure")
            self.assertNotIn("timed out", results[0][1])
            for node in (0, 1):  # no rank's log but its own lines and the launcher's
                for line in results[node][1].splitlines():
                    self.assertRegex(line, r"^(\[rank \d\] |cleave launch: error: )", line)

    def test_a_host_cut_off_ends_the_run_within_the_timeout(self):
        """Host 1's link goes down mid-training (no connection closes: its packets are lost): every
        rank on both hosts fails once the 5 s timeout runs out, saying so, instead of hanging."""
        with TwoHosts() as hosts:
            nodes = self.start_endless_training(hosts, timeout=5)
            cut = time.monotonic()
            subprocess.run(["ip", "-n", hosts.hosts[1], "link", "set", hosts.hosts[1], "down"], check=True)
            results = [node.communicate(timeout=90) for node in nodes]
            self.assertLess(time.monotonic() - cut, 5 + 2 + 10)  # the timeout, the announcement's grace, slack
            for node, (out, err) in zip(nodes, results):
                self.assertEqual(node.returncode, 1, err)
                self.assertRegex(err.splitlines()[-1], r"^cleave launch: error: rank \d exited with status 1: "
                                                       r"cleave train: error: (stage '\w+', action \d+[FBIW]\d+ "
                                                       r"\(microbatch \d+\), receiving .* from rank \d: |step \d+'s [^:]*: )?"
                                                       r"rank \d: .* failed: .*[Tt]imed out.* \(timeout 5 s\)$")

    def test_a_split_plan_runs_across_ranks(self):
        plan = self.path("split")
        run("split", os.path.join(EXAMPLES, "transformer.onnx"), "--profile",
            os.path.join(EXAMPLES, "profiles", "gpu.json"), "-o", plan, check=True)
        run("run", plan, "--seed", 4, "--save-outputs", self.path("single.npz"), check=True)
        code, _, err = launch(2, "cleave", "run", plan, "--distributed", "--seed", 4, "--save-outputs",
                              self.path("dist.npz"))
        self.assertEqual(code, 0, err)
        with open(self.path("single.npz"), "rb") as a, open(self.path("dist.npz"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_a_partition_plan_runs_each_partition_on_its_rank(self):
        """A partition plan across ranks (partition k on rank k, the DAG's edges as messages; a
        rank with no partition takes part and runs nothing): the single-process run's bytes, and
        the whole model's outputs."""
        model = os.path.join(EXAMPLES, "transformer.onnx")
        devices = self.path("devices.json")
        with open(devices, "w") as f:  # the transformer's 570 KiB fit two of three devices
            json.dump({"devices": [{"name": f"d{i}", "logical_id": i, "available_mem_bytes": 400000}
                                   for i in range(3)]}, f)
        plan = self.path("partitioned")
        code, out, err = run("partition", model, "--devices", devices, "-o", plan)
        self.assertEqual(code, 0, err)
        self.assertIn("partition_1", out)
        run("run", plan, "--seed", 4, "--save-outputs", self.path("single.npz"), check=True)
        run("run", model, "--seed", 4, "--save-outputs", self.path("whole.npz"), check=True)
        code, _, err = launch(3, "cleave", "run", plan, "--distributed", "--seed", 4, "--save-outputs",
                              self.path("dist.npz"))
        self.assertEqual(code, 0, err)
        self.assertIn("[rank 0] rank 0 of 3: ran partition_0", err)
        self.assertIn("[rank 1] rank 1 of 3: ran partition_1", err)
        self.assertIn("[rank 2] rank 2 of 3: ran over", err)  # nothing of its own
        with open(self.path("single.npz"), "rb") as a, open(self.path("dist.npz"), "rb") as b:
            self.assertEqual(a.read(), b.read())
        np.testing.assert_array_equal(np.load(self.path("dist.npz"))["y"], np.load(self.path("whole.npz"))["y"])

    def test_training_stages_across_ranks_follows_the_whole_model(self):
        """A weight shared by stages 0 and 1 (tied: its gradients are summed across ranks) and a skip
        connection from stage 0 to stage 2; SGD and AdamW over uneven microbatches (8 rows: 3, 3, 2)."""
        import torch
        torch.manual_seed(0)

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(6, 16), torch.nn.Linear(16, 16)
                self.c, self.d = torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)
                self.loss = torch.nn.CrossEntropyLoss()

            def forward(self, x, target):
                h = torch.relu(self.a(x))
                g = torch.tanh(self.c(torch.tanh(self.b(h))))
                return self.loss(self.d(torch.relu(self.b(g)) + h), target)

        model = self.path("shared.onnx")
        torch.onnx.export(Model(), (torch.randn(8, 6), torch.zeros(8, dtype=torch.long)), model,
                          input_names=["x", "target"], output_names=["loss"], opset_version=13,
                          do_constant_folding=False, dynamic_axes={"x": {0: "n"}, "target": {0: "n"}}, dynamo=False)
        g = torch.Generator().manual_seed(1)
        np.savez(self.path("data.npz"), x=torch.randn(20, 6, generator=g).numpy(),
                 target=torch.randint(0, 4, (20,), generator=g).numpy())
        plan = self.path("stages")
        code, out, err = run("pipeline", model, "--stages", 3, "-o", plan)
        self.assertEqual(code, 0, err)
        self.assertIn("tie group: b.weight on stages [0,1]", out)
        self.assertIn("skip connection", out)
        for optimizer in (["--optimizer", "sgd", "--lr", "0.1", "--momentum", "0.9"],
                          ["--optimizer", "adamw", "--lr", "0.05"]):
            common = ["--data", self.path("data.npz"), "--batch", 8, "--steps", 4, "--microbatches", 3, *optimizer, "--json"]
            losses = lambda text: [json.loads(line.split("] ", 1)[-1])["loss"] for line in text.splitlines()]
            code, whole, err = run("train", model, *common)
            self.assertEqual(code, 0, err)
            code, local, err = run("train", plan, *common)
            self.assertEqual(code, 0, err)
            np.testing.assert_allclose(losses(local), losses(whole), rtol=1e-6)
            self.assertLess(losses(whole)[-1], losses(whole)[0])
            for nproc, schedule in ((2, []), (3, []), (3, ["--schedule", "1f1b"]), (3, ["--schedule", "zero_bubble"])):
                with self.subTest(optimizer=optimizer[1], nproc=nproc, schedule=schedule):
                    code, ranked, err = launch(nproc, "cleave", "train", plan, *common, *schedule, "--timing")
                    self.assertEqual(code, 0, err)
                    self.assertEqual(losses(ranked), losses(local))
                    # Every message's shape comes from the plan (symbolic rows bound by the data):
                    # no shape header, not even on the first step's uneven microbatches.
                    steps = [json.loads(line.split("] ", 1)[-1]) for line in ranked.splitlines()]
                    self.assertEqual([s["shape_headers"] for s in steps], [0] * 4)
                    self.check_timeline(steps[-1]["actions"], nproc, 3, 3, split=schedule == ["--schedule", "zero_bubble"])
                    self.check_transport_timing(steps, plan, nproc, 3)
            code, out, err = run("train", plan, *common, "--timing")  # one process: nothing travels
            self.assertEqual(code, 0, err)
            for line in out.splitlines():
                self.assertEqual(json.loads(line)["rank_receives"], [0])
                self.assertEqual(json.loads(line)["rank_transport_cpu_s"], [0.0])
        # Data that does not fit the plan's inputs: a one-line error before connecting (the first
        # rank to fail ends the launch; the other may be stopped before it prints its own line).
        np.savez(self.path("narrow.npz"), x=np.zeros((20, 7), np.float32), target=np.zeros(20, np.int64))
        code, _, err = launch(2, "cleave", "train", plan, *common[2:], "--data", self.path("narrow.npz"))
        self.assertEqual(code, 1, err)
        self.assertRegex(err, r"cleave launch: error: rank [01] exited with status 1: cleave train: error: --data "
                         + re.escape(self.path("narrow.npz")) + r": data 'x' has 7 in dim 1, the plan's input 6")
        self.assertNotIn("rendezvous", err)
        self.assertNotIn("receive from", err)
        # A plan whose recorded shape of a value crossing ranks is wrong: the sender names both.
        import shutil
        wrong = self.path("wrong_shapes")
        shutil.copytree(plan, wrong)
        with open(os.path.join(wrong, "plan.json")) as f:
            text = json.load(f)
        crossing = set(text["submodules"][0]["outputs"]) & {i["value"] for i in text["submodules"][1]["inputs"]}
        value = next(v for v in text["values"] if v["name"] in crossing and v["shape"][-1] == 16)
        value["shape"][-1] = 17
        with open(os.path.join(wrong, "plan.json"), "w") as f:
            json.dump(text, f)
        code, _, err = launch(2, "cleave", "train", wrong, *common)
        self.assertEqual(code, 1, err)
        self.assertIn("where its shape key says Float[3, 17] (from the plan", err)
        # A value whose shape the plan leaves open travels with a header every time (its shape
        # may change between messages), in both directions; the losses stay the same.
        value["shape"][-1] = None
        with open(os.path.join(wrong, "plan.json"), "w") as f:
            json.dump(text, f)
        code, ranked, err = launch(2, "cleave", "train", wrong, *common, "--timing")
        self.assertEqual(code, 0, err)
        self.assertEqual(losses(ranked), losses(local))
        headers = [json.loads(line.split("] ", 1)[-1])["shape_headers"] for line in ranked.splitlines()]
        self.assertEqual(headers, [2 * 3] * 4)  # forward and gradient, for each of 3 microbatches
        # -o: the trained stages as a plan directory, the same bytes from one process and from 3
        # ranks; their weights those of the whole model's training; the tied copies equal.
        import onnx
        from onnx import numpy_helper
        outs = {name: self.path(f"trained_{name}") for name in ("whole", "local", "ranked")}
        run("train", model, *common, "-o", outs["whole"], check=True)
        run("train", plan, *common, "-o", outs["local"], check=True)
        code, _, err = launch(3, "cleave", "train", plan, *common, "--model", model, "-o", outs["ranked"])
        self.assertEqual(code, 0, err)
        whole = {t.name: numpy_helper.to_array(t)
                 for t in onnx.load(os.path.join(outs["whole"], "trained.onnx")).graph.initializer}
        # --model: the whole model with the stages' trained parameters, as training it whole gives.
        assembled = {t.name: numpy_helper.to_array(t)
                     for t in onnx.load(os.path.join(outs["ranked"], "trained.onnx")).graph.initializer}
        self.assertEqual(sorted(assembled), sorted(whole))
        for name, value in whole.items():
            np.testing.assert_allclose(assembled[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
        other = self.path("other.onnx")
        torch.onnx.export(torch.nn.Linear(6, 4), torch.randn(2, 6), other, input_names=["x"], opset_version=17, dynamo=False)
        code, _, err = run("train", plan, *common, "--model", other, "-o", self.path("never"))
        self.assertOneLineError(code, err, "--model " + other, "is in no stage of the plan")
        self.assertFalse(os.path.exists(self.path("never")))
        stage_files = sorted(f for f in os.listdir(plan) if f.endswith(".onnx"))
        self.assertEqual(sorted(f for f in os.listdir(outs["ranked"]) if f.endswith(".onnx")),
                         sorted(stage_files + ["trained.onnx"]))
        tied = []
        for name in stage_files:
            with open(os.path.join(outs["local"], name), "rb") as a, open(os.path.join(outs["ranked"], name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
            for tensor in onnx.load(os.path.join(outs["ranked"], name)).graph.initializer:
                if tensor.name in whole and tensor.data_type == onnx.TensorProto.FLOAT:
                    np.testing.assert_allclose(numpy_helper.to_array(tensor), whole[tensor.name], rtol=1e-4, atol=1e-5)
                if tensor.name == "b.weight":
                    tied.append(numpy_helper.to_array(tensor))
        self.assertEqual(len(tied), 2)
        np.testing.assert_array_equal(tied[0], tied[1])
        code, _, err = run("run", outs["ranked"], "--seed", 1)
        self.assertEqual(code, 0, err)
        # Interleaved 1F1B: 4 stages on 2 ranks (stages 0 and 2 on rank 0), 4 microbatches.
        four = self.path("four")
        run("pipeline", model, "--stages", 4, "-o", four, check=True)
        common = ["--data", self.path("data.npz"), "--batch", 8, "--steps", 3, "--microbatches", 4, "--lr", "0.1", "--json"]
        code, local, err = run("train", four, *common)
        self.assertEqual(code, 0, err)
        code, ranked, err = launch(2, "cleave", "train", four, *common, "--schedule", "interleaved")
        self.assertEqual(code, 0, err)
        self.assertEqual(losses(ranked), losses(local))
        code, _, err = launch(2, "cleave", "train", four, *common, "--schedule", "1f1b")
        self.assertEqual(code, 1)
        self.assertIn("1f1b runs one stage per rank (4 stages on 2 ranks)", err)

    def test_a_weight_read_through_an_alias_trains_tied_across_stages(self):
        """w is read by the first stage as itself and by a later one through Identity(w), as exporters
        write a deduplicated weight: every stage holding it holds one tensor under both names, so
        its gradients are summed across stages and the plan trains as the whole model does."""
        rng = np.random.default_rng(5)
        inits = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32) * 0.5, name)
                 for name in ("w", "v")]
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m0"]), helper.make_node("Relu", ["m0"], ["h0"]),
                 helper.make_node("MatMul", ["h0", "v"], ["m1"]), helper.make_node("Tanh", ["m1"], ["h1"]),
                 helper.make_node("Identity", ["w"], ["w_again"], name="w_identity"),
                 helper.make_node("MatMul", ["h1", "w_again"], ["m2"]), helper.make_node("Sub", ["m2", "y"], ["d"]),
                 helper.make_node("Mul", ["d", "d"], ["dd"]),
                 helper.make_node("ReduceMean", ["dd"], ["loss"], keepdims=0)]
        graph = helper.make_graph(nodes, "aliased", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
                                                     helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                                  [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
        model = self.path("aliased.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        np.savez(self.path("data.npz"), x=rng.standard_normal((8, 4)).astype(np.float32),
                 y=rng.standard_normal((8, 4)).astype(np.float32))
        plan = self.path("stages")
        code, out, err = run("pipeline", model, "--stages", 3, "-o", plan)
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"tie group: w \(also read as w_again\) on stages \[0,[12]\]")
        common = ["--data", self.path("data.npz"), "--batch", 8, "--steps", 3, "--microbatches", 2,
                  "--optimizer", "sgd", "--lr", "0.1", "--json"]
        losses = lambda text: [json.loads(line.split("] ", 1)[-1])["loss"] for line in text.splitlines()]
        code, whole, err = run("train", model, *common)
        self.assertEqual(code, 0, err)
        code, local, err = run("train", plan, *common)
        self.assertEqual(code, 0, err)
        self.assertLess(losses(whole)[-1], losses(whole)[0])
        np.testing.assert_allclose(losses(local), losses(whole), rtol=1e-6)
        code, ranked, err = launch(3, "cleave", "train", plan, *common)
        self.assertEqual(code, 0, err)
        self.assertEqual(losses(ranked), losses(local))

    def test_environment_errors_are_one_line(self):
        model = self.mlp_with_skip()
        plan = self.path("plan")
        run("pipeline", model, "--stages", 2, "-o", plan, check=True)
        base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
        cases = [({}, "WORLD_SIZE is not set"),
                 ({"WORLD_SIZE": "2"}, "RANK is not set"),
                 ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "RANK=2 is not below WORLD_SIZE=2"),
                 ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"}, "MASTER_PORT='99999'"),
                 ({"WORLD_SIZE": "two", "RANK": "0"}, "WORLD_SIZE='two'"),
                 ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_WORLD_SIZE": "-1", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": "1"}, "LOCAL_WORLD_SIZE='-1'")]
        for extra, needle in cases:
            with self.subTest(env=extra):
                proc = subprocess.run([CLEAVE, "run", plan, "--distributed"], env={**base, **extra},
                                      capture_output=True, text=True, timeout=60)
                self.assertOneLineError(proc.returncode, proc.stderr, needle)

    def test_a_peer_that_never_comes_times_out_naming_the_rendezvous(self):
        model = self.mlp_with_skip()
        plan = self.path("plan")
        run("pipeline", model, "--stages", 2, "-o", plan, check=True)
        port = free_port()
        env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "CLEAVE_DIST_TIMEOUT": "3"}
        start = time.monotonic()
        proc = subprocess.run([CLEAVE, "run", plan, "--distributed"], env=env, capture_output=True, text=True,
                              timeout=120)
        self.assertLess(time.monotonic() - start, 60)
        self.assertOneLineError(proc.returncode, proc.stderr, f"rendezvous at 127.0.0.1:{port}", "timeout 3 s")

    def test_bind_cores_gives_each_rank_its_own_cores(self):
        allowed = sorted(os.sched_getaffinity(0))

        def cpus_of(listing):  # "0-2,5" -> {0, 1, 2, 5}
            cpus = set()
            for part in listing.split(","):
                first, _, last = part.partition("-")
                cpus.update(range(int(first), int(last or first) + 1))
            return cpus

        nproc = min(2, len(allowed))
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the launcher's default
        proc = subprocess.run([CLEAVE, "launch", "--nproc", str(nproc), "--master-port", str(free_port()), "--bind-cores",
                               "--", "sh", "-c", 'echo "cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2) '
                               'threads $OMP_NUM_THREADS"'], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        out = proc.stdout
        found = {int(r): cpus_of(c) for r, c in re.findall(r"\[rank (\d+)\] cpus (\S+) threads", out)}
        self.assertEqual(sorted(found), list(range(nproc)))
        share = len(allowed) // nproc
        for r, cpus in found.items():
            self.assertEqual(cpus, set(allowed[r * share:(r + 1) * share]))  # its own share, in order
        self.assertIn(f"threads {share}", out)  # OMP_NUM_THREADS defaults to the share
        code, _, err = run("launch", "--nproc", len(allowed) + 1, "--bind-cores", "--", "true")
        self.assertOneLineError(code, err, f"--bind-cores needs a core per rank: {len(allowed) + 1} ranks, "
                                           f"{len(allowed)} cores", exit_code=2)

    def test_launch_restarts_every_rank_up_to_max_restarts(self):
        # Rank 1 fails on the first two starts: two restarts, each announced, then all succeed;
        # with one restart allowed the second failure ends the run. A usage error (exit 2) would
        # only repeat, so it is not restarted.
        flaky = ('echo "start $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS"; '
                 '[ "$RANK" = 1 ] && [ "$TORCHELASTIC_RESTART_COUNT" -lt 2 ] && { echo "flaked" >&2; exit 3; }; '
                 'sleep 0.2; exit 0')
        code, out, err = run("launch", "--nproc", 2, "--master-port", free_port(), "--max-restarts", 2, "--",
                             "sh", "-c", flaky)
        self.assertEqual(code, 0, err)
        self.assertEqual([l for l in err.splitlines() if l.startswith("cleave launch:")],
                         ["cleave launch: rank 1 exited with status 3: flaked; restarting every rank (restart 1 of 2)",
                          "cleave launch: rank 1 exited with status 3: flaked; restarting every rank (restart 2 of 2)"])
        # Rank 1 echoes before it fails; rank 0 may be stopped before its echo in a failed start
        # (under load its shell need not have run yet), and echoes in the last one.
        for restart in range(3):
            self.assertIn(f"[rank 1] start {restart} of 2", out)
        self.assertIn("[rank 0] start 2 of 2", out)
        code, _, err = run("launch", "--nproc", 2, "--master-port", free_port(), "--max-restarts", 1, "--",
                           "sh", "-c", flaky)
        self.assertEqual(code, 1, err)
        self.assertEqual(err.count("restarting every rank"), 1)
        self.assertEqual(err.splitlines()[-1], "cleave launch: error: rank 1 exited with status 3: flaked")
        code, _, err = run("launch", "--nproc", 2, "--master-port", free_port(), "--max-restarts", 3, "--",
                           "sh", "-c", '[ "$RANK" = 0 ] && { echo "bad flag" >&2; exit 2; }; sleep 5')
        self.assertNotIn("restarting", err)
        self.assertEqual(err.splitlines()[-1], "cleave launch: error: rank 0 exited with status 2: bad flag")

    def test_launch_stops_every_rank_when_one_fails(self):
        start = time.monotonic()
        code, out, err = launch(3, "sh", "-c", 'echo "up $RANK/$WORLD_SIZE $LOCAL_RANK"; '
                                               '[ "$RANK" = 1 ] && { sleep 1; echo "rank one broke" >&2; exit 4; }; sleep 60')
        self.assertLess(time.monotonic() - start, 30)  # the sleepers were stopped
        self.assertOneLineError(code, err.splitlines()[-1] + "\n", "rank 1 exited with status 4: rank one broke")
        self.assertIn("[rank 1] rank one broke", err)
        for r in range(3):
            self.assertIn(f"[rank {r}] up {r}/3 {r}", out)
        code, _, err = run("launch", "--nproc", 2)
        self.assertOneLineError(code, err, "no command", exit_code=2)
        code, _, err = run("launch", "--nproc", 2, "--nnodes", 2, "--node-rank", 2, "--", "true")
        self.assertOneLineError(code, err, "--node-rank 2 is not below --nnodes 2", exit_code=2)
        code, _, err = launch(2, "/nonexistent/program")
        self.assertEqual(code, 1)
        self.assertIn("cannot run '/nonexistent/program'", err)


if __name__ == "__main__":
    main()
