#!/usr/bin/env python3
"""Checks every file under deploy/ against the code it deploys.

- Kubernetes manifests parse, name the prepflow namespace, select the pods
  they template, give probes ports that exist, and define every $(VAR)
  their args use; workers are a DaemonSet on a labelled node pool with the
  data mounted read-only, the scheduler a Deployment behind a Service.
- The autoscaling manifests (k8s/autoscale/) have the fields their APIs
  require (HorizontalPodAutoscaler autoscaling/v2, the adapter's rules,
  KEDA's ScaledObject), scale the elastic worker Deployment on the
  recording rule rules.yml defines, with one pod's cores as the target, and
  give its pods time to drain.
- systemd units parse, run a binary we build with flags it accepts, and
  sandbox it (ProtectSystem=strict; the worker's data read-only).
- Every flag in the manifests, units and env files is one the binary's
  --help lists.
- Prometheus config and rules pass promtool (check config, check rules, and
  the rule unit tests), where promtool is installed.
- The Grafana dashboard is make_dashboard.py's output, and every series it
  and the rules query is one the code exports.
- The Dockerfile builds in two bookworm stages, and its runtime stage
  installs the package of every shared library our binaries link.

    tests/deploy/deploy_test.py BUILD_DIR
"""
import configparser
import json
import pathlib
import re
import shutil
import subprocess
import sys
import unittest

import yaml

SOURCE = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = SOURCE / "deploy"
BIN = None  # set from argv


def help_flags(binary):
    out = subprocess.run([BIN / binary, "--help"], capture_output=True, text=True, check=True)
    return set(re.findall(r"--([a-z][a-z0-9-]*)", out.stdout))


def used_flags(args):
    """Flags named in a list of arguments ("--a=b", "--c", "d")."""
    return {m.group(1) for a in args for m in [re.match(r"--([a-z][a-z0-9-]*)", a)] if m}


def exported_series():
    """Every prepflow_ metric name the C++ code registers, with histogram suffixes."""
    names = set()
    for folder in ("server", "scheduler", "client"):
        for path in (SOURCE / folder).rglob("*.cc"):
            names |= set(re.findall(r'"(prepflow_[a-z_]+)"', path.read_text()))
    # storage/metrics.cc's collectors name their families prefix + suffix, for
    # the worker and the trainer.
    for suffix in re.findall(r'"(_(?:storage|cache)_[a-z_]+)"',
                             (SOURCE / "storage/metrics.cc").read_text()):
        names |= {"prepflow_worker" + suffix, "prepflow_client" + suffix}
    histograms = {"prepflow_worker_stage_seconds", "prepflow_scheduler_rebalance_seconds"}
    for h in histograms:
        assert h in names, h
        names |= {h + "_bucket", h + "_count", h + "_sum"}
    return names


def queried_series(expr):
    # Whole names, so that a recording rule's level:metric:operation counts as one.
    return set(re.findall(r"(?<![\w:])([a-z_:]*prepflow_[a-z0-9_:]*)", expr))


class Kubernetes(unittest.TestCase):
    def setUp(self):
        self.docs = []
        for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    self.docs.append((path.name, doc))
        self.by_kind = {}
        for name, doc in self.docs:
            self.by_kind.setdefault(doc["kind"], []).append(doc)
        config = self.by_kind["ConfigMap"][0]
        self.config_keys = set(config["data"])

    def test_every_object_is_named_in_the_namespace(self):
        self.assertGreaterEqual(len(self.docs), 6)
        for name, doc in self.docs:
            with self.subTest(file=name, kind=doc.get("kind")):
                self.assertIn("apiVersion", doc)
                self.assertTrue(doc["metadata"]["name"])
                if doc["kind"] != "Namespace":
                    self.assertEqual(doc["metadata"]["namespace"], "prepflow")

    def pods(self):
        for kind in ("DaemonSet", "Deployment", "Job"):
            for doc in self.by_kind.get(kind, []):
                yield kind, doc, doc["spec"]["template"]

    def test_workloads_select_their_pods_and_define_what_they_use(self):
        for kind, doc, template in self.pods():
            with self.subTest(kind=kind, name=doc["metadata"]["name"]):
                selector = doc["spec"].get("selector", {}).get("matchLabels", {})
                for k, v in selector.items():
                    self.assertEqual(template["metadata"]["labels"].get(k), v)
                for c in template["spec"]["containers"]:
                    ports = {p["name"] for p in c.get("ports", [])}
                    for probe in ("readinessProbe", "livenessProbe"):
                        if probe in c and "exec" in c[probe]:
                            # prepflow probe: its flags exist, and it dials the
                            # container's own gRPC port.
                            command = c[probe]["exec"]["command"]
                            self.assertEqual(command[:2], ["prepflow", "probe"])
                            self.assertLessEqual(used_flags(command),
                                                 help_flags_of_subcommand("probe"))
                            grpc_port = [p["containerPort"] for p in c["ports"]
                                         if p["name"] == "grpc"][0]
                            self.assertIn(f"--address=127.0.0.1:{grpc_port}", command)
                        elif probe in c:
                            action = c[probe].get("tcpSocket") or c[probe].get("httpGet")
                            self.assertIn(action["port"], ports, probe)
                    env = {e["name"] for e in c.get("env", [])}
                    if c.get("envFrom"):
                        env |= self.config_keys
                    for arg in c.get("args", []):
                        for var in re.findall(r"\$\((\w+)\)", arg):
                            self.assertIn(var, env, f"{arg}: $({var}) is not defined")
                    self.assertFalse(c["securityContext"]["allowPrivilegeEscalation"]
                                     if "securityContext" in c else False)

    def test_workers_are_a_daemonset_on_a_node_pool_with_data_read_only(self):
        ds = self.by_kind["DaemonSet"][0]
        spec = ds["spec"]["template"]["spec"]
        self.assertTrue(spec["nodeSelector"], "workers must be pinned to a labelled node pool")
        mounts = spec["containers"][0]["volumeMounts"]
        self.assertTrue(all(m.get("readOnly") for m in mounts))
        args = spec["containers"][0]["args"]
        self.assertTrue(any(a.startswith("--scheduler=") for a in args))
        self.assertTrue(any(a.startswith("--advertise=$(POD_IP)") for a in args))

    def test_the_scheduler_is_a_deployment_behind_a_service(self):
        deployment = [d for d in self.by_kind["Deployment"]
                      if d["metadata"]["name"] == "prepflow-scheduler"][0]
        service = self.by_kind["Service"][0]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        for k, v in service["spec"]["selector"].items():
            self.assertEqual(pod_labels.get(k), v)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        target_ports = {p["targetPort"] for p in service["spec"]["ports"]}
        self.assertLessEqual(target_ports, {p["name"] for p in container["ports"]})
        # Workers and jobs dial the Service by its DNS name and port.
        address = f'{service["metadata"]["name"]}.prepflow.svc:{service["spec"]["ports"][0]["port"]}'
        for _, doc, template in self.pods():
            for c in template["spec"]["containers"]:
                for a in c.get("args", []):
                    if a.startswith("--scheduler="):
                        self.assertEqual(a.split("=", 1)[1], address)

    def test_flags_exist(self):
        for kind, doc, template in self.pods():
            for c in template["spec"]["containers"]:
                binary = c["command"][0]
                args = c.get("args", [])
                flags = used_flags(args)
                known = help_flags(binary) if binary != "prepflow" else \
                    help_flags_of_subcommand(args[0])
                with self.subTest(binary=binary):
                    self.assertLessEqual(flags, known, f"unknown flags: {flags - known}")

    TOKEN_FLAGS = ("--auth-token-file", "--worker-token-file", "--job-token-file")

    def secret_of(self, template):
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        name = volumes["tls"]["secret"]["secretName"]
        secrets = {d["metadata"]["name"]: d for d in self.by_kind["Secret"]}
        self.assertIn(name, secrets, "a pod mounts a Secret the manifests do not show")
        return secrets[name]

    def test_every_pod_uses_tls_and_its_tokens_from_its_secret(self):
        for kind, doc, template in self.pods():
            with self.subTest(kind=kind, name=doc["metadata"]["name"]):
                keys = set(self.secret_of(template)["stringData"])
                c = template["spec"]["containers"][0]
                mount = [m for m in c["volumeMounts"] if m["name"] == "tls"][0]
                self.assertTrue(mount["readOnly"])
                args = dict(a.split("=", 1) for a in c["args"] if "=" in a)
                self.assertNotIn("--insecure", c["args"])
                self.assertTrue(set(args) & set(self.TOKEN_FLAGS), "no token")
                for flag, path in args.items():
                    if flag.startswith("--tls-") and flag != "--tls-server-name" or \
                            flag in self.TOKEN_FLAGS:
                        self.assertTrue(path.startswith(mount["mountPath"] + "/"), path)
                        self.assertIn(path.rsplit("/", 1)[1], keys)

    def test_workers_and_jobs_hold_separate_credentials(self):
        # One shared token let any job register a worker and feed other jobs
        # fabricated tensors: the shipped set-up gives each role its own.
        for kind, doc, template in self.pods():
            c = template["spec"]["containers"][0]
            args = dict(a.split("=", 1) for a in c["args"] if "=" in a)
            name = c["command"][0]
            with self.subTest(pod=name):
                if name == "prepflow-scheduler":
                    self.assertNotIn("--auth-token-file", args)
                    self.assertNotEqual(args["--worker-token-file"], args["--job-token-file"])
                elif name == "prepflow-worker":
                    self.assertTrue(args["--worker-token-file"].endswith("/worker-token"))
                    self.assertTrue(args["--auth-token-file"].endswith("/job-token"))
                else:  # a trainer: the job credential only
                    keys = set(self.secret_of(template)["stringData"])
                    self.assertNotIn("worker-token", keys)
                    self.assertNotIn("tls.key", keys)
                    self.assertTrue(args["--auth-token-file"].endswith("/job-token"))

    def test_only_the_scheduler_holds_the_lease_key(self):
        # Whoever reads the key can forge leases and take workers' ids.
        for kind, doc, template in self.pods():
            c = template["spec"]["containers"][0]
            secrets = {v["secret"]["secretName"] for v in template["spec"]["volumes"]
                       if "secret" in v}
            with self.subTest(pod=c["command"][0]):
                if c["command"][0] == "prepflow-scheduler":
                    args = dict(a.split("=", 1) for a in c["args"] if "=" in a)
                    self.assertTrue(args["--lease-key-file"].endswith("/lease-key"))
                    self.assertIn("prepflow-scheduler", secrets)
                else:
                    self.assertNotIn("prepflow-scheduler", secrets)

    def test_scrape_snippet_parses(self):
        snippet = yaml.safe_load((DEPLOY / "k8s/prometheus-scrape.yml").read_text())
        self.assertEqual(snippet["scrape_configs"][0]["kubernetes_sd_configs"][0]["role"], "pod")


def help_flags_of_subcommand(command):
    out = subprocess.run([BIN / "prepflow", command, "--help"], capture_output=True, text=True,
                         check=True)
    return set(re.findall(r"--([a-z][a-z0-9-]*)", out.stdout))


class Autoscaling(unittest.TestCase):
    """Two elastic Deployments, each with an HPA (or a KEDA ScaledObject) on
    its own recorded signal: spot on the plans' want net of the fixed pool,
    the fallback on its grants and a lasting shortfall."""

    def setUp(self):
        self.docs = {}  # by (kind, name)
        for path in sorted((DEPLOY / "k8s/autoscale").glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                self.docs[doc["kind"], doc["metadata"]["name"]] = doc
        config = yaml.safe_load((DEPLOY / "k8s/configmap.yaml").read_text())["data"]
        self.grace = int(config["WORKER_GRACE_SECONDS"])
        self.config = config
        rules = yaml.safe_load((DEPLOY / "prometheus/rules.yml").read_text())
        self.recorded = {r["record"]: r["expr"] for g in rules["groups"]
                         for r in g["rules"] if "record" in r}
        # Each elastic Deployment, the recorded signal it scales on, and
        # the ConfigMap key of its class.
        self.elastic = {
            "spot": (yaml.safe_load((DEPLOY / "k8s/worker-deployment.yaml").read_text()),
                     "prepflow:elastic_wanted_cores", "ELASTIC_WORKER_CLASS"),
            "fallback": (yaml.safe_load((DEPLOY / "k8s/worker-fallback.yaml").read_text()),
                         "prepflow:fallback_wanted_cores", "FALLBACK_WORKER_CLASS"),
        }

    @staticmethod
    def pod_cores(deployment):
        return deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
            "cpu"]

    def test_each_hpa_scales_its_deployment_on_the_adapters_metric(self):
        adapter = yaml.safe_load(
            self.docs["ConfigMap", "prepflow-adapter-rules"]["data"]["config.yaml"])
        served = {r["name"]["as"]: r for r in adapter["externalRules"]}
        for which, (deployment, signal, _) in self.elastic.items():
            with self.subTest(which):
                name = deployment["metadata"]["name"]
                hpa = self.docs["HorizontalPodAutoscaler", name]
                self.assertEqual(hpa["apiVersion"], "autoscaling/v2")
                self.assertEqual(hpa["metadata"]["namespace"], "prepflow")
                spec = hpa["spec"]
                ref = spec["scaleTargetRef"]
                self.assertEqual((ref["apiVersion"], ref["kind"], ref["name"]),
                                 ("apps/v1", "Deployment", name))
                self.assertGreaterEqual(spec["minReplicas"], 1)
                self.assertGreater(spec["maxReplicas"], spec["minReplicas"])
                [metric] = spec["metrics"]
                self.assertEqual(metric["type"], "External")
                target = metric["external"]["target"]
                self.assertEqual(target["type"], "AverageValue")
                self.assertEqual(target["averageValue"], self.pod_cores(deployment),
                                 "one pod's cores")
                # The adapter serves that name, from the series a rule records.
                rule = served[metric["external"]["metric"]["name"]]
                self.assertEqual(rule["seriesQuery"].strip("'"), signal)
                self.assertIn(signal, self.recorded)
                for policy in spec["behavior"]["scaleDown"]["policies"] + \
                        spec["behavior"]["scaleUp"]["policies"]:
                    self.assertIn(policy["type"], ("Pods", "Percent"))
                    self.assertGreater(policy["value"], 0)

    def test_keda_asks_prometheus_for_the_same_signals(self):
        for which, (deployment, signal, _) in self.elastic.items():
            with self.subTest(which):
                so = self.docs["ScaledObject", deployment["metadata"]["name"]]
                self.assertEqual(so["apiVersion"], "keda.sh/v1alpha1")
                spec = so["spec"]
                self.assertEqual(spec["scaleTargetRef"]["name"], deployment["metadata"]["name"])
                [trigger] = spec["triggers"]
                self.assertEqual(trigger["type"], "prometheus")
                self.assertEqual(trigger["metricType"], "AverageValue")
                self.assertEqual(trigger["metadata"]["query"], signal)
                self.assertEqual(trigger["metadata"]["threshold"], self.pod_cores(deployment))
                self.assertTrue(trigger["metadata"]["serverAddress"].startswith("http"))
                # Spot keeps a pod to measure with; the fallback may go to zero.
                self.assertEqual(spec["minReplicaCount"], 1 if which == "spot" else 0)

    def test_the_signals_name_the_configured_classes(self):
        spot = self.config["ELASTIC_WORKER_CLASS"]
        fallback = self.config["FALLBACK_WORKER_CLASS"]
        expr = self.recorded["prepflow:elastic_wanted_cores"]
        self.assertIn('what="wanted_cores"', expr)
        # The fixed pool is what is neither elastic class.
        self.assertIn(f'class!~"{spot}|{fallback}"', expr)
        expr = self.recorded["prepflow:fallback_wanted_cores"]
        self.assertIn(f'what="granted", class="{fallback}"', expr)
        self.assertIn("min_over_time(prepflow:pool_short_cores[", expr)
        # Grants fill the fixed pool before the fallback: it is dearer.
        self.assertGreater(float(self.config["FALLBACK_WORKER_COST_PER_CORE_HOUR"]),
                           float(self.config["WORKER_COST_PER_CORE_HOUR"]))

    def test_elastic_pods_drain_within_their_grace_period(self):
        fixed = yaml.safe_load((DEPLOY / "k8s/worker-daemonset.yaml").read_text())
        for which, (deployment, _, class_key) in self.elastic.items():
            args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
            self.assertIn(f"--class=$({class_key})", args)
        for workload in [d for d, _, _ in self.elastic.values()] + [fixed]:
            with self.subTest(workload=workload["metadata"]["name"]):
                self.assert_drains_before_it_is_killed(workload["spec"]["template"]["spec"])

    # The preStop hook drains the worker and waits for it (up to
    # --grace-seconds + 10 s) before Kubernetes sends SIGTERM; the pod's grace
    # period covers that wait, or the worker is killed mid-drain.
    def assert_drains_before_it_is_killed(self, spec):
        self.assertGreaterEqual(spec["terminationGracePeriodSeconds"], self.grace + 10)
        [container] = spec["containers"]
        self.assertIn("--grace-seconds=$(WORKER_GRACE_SECONDS)", container["args"])
        hook = container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(hook[:2], ["/bin/sh", "-c"])
        words = hook[2].split()
        self.assertEqual(words[:3], ["exec", "prepflow-worker", "--drain"])
        self.assertIn('--grace-seconds="$WORKER_GRACE_SECONDS"', words)
        self.assertLessEqual(used_flags(words[2:]), help_flags("prepflow-worker"))


class Systemd(unittest.TestCase):
    def unit(self, name):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str  # systemd keys are case-sensitive
        parser.read(DEPLOY / "systemd" / name)
        return parser

    def env_args(self, name, var):
        text = (DEPLOY / "systemd" / name).read_text()
        m = re.search(rf"^{var}=(.*)$", text, re.M)
        self.assertIsNotNone(m, f"{name} sets {var}")
        return m.group(1).split()

    def test_units_run_our_binaries_sandboxed_with_real_flags(self):
        for binary, var, extra in (
                ("prepflow-worker", "PREPFLOW_WORKER_ARGS", {"ReadOnlyPaths": "/data"}),
                ("prepflow-scheduler", "PREPFLOW_SCHEDULER_ARGS", {})):
            with self.subTest(unit=binary):
                unit = self.unit(f"{binary}.service")
                self.assertEqual(set(unit.sections()), {"Unit", "Service", "Install"})
                service = unit["Service"]
                exec_start = service["ExecStart"].split()
                self.assertEqual(exec_start[0], f"/usr/local/bin/{binary}")
                self.assertEqual(exec_start[1], f"${var}")
                self.assertEqual(service["ProtectSystem"], "strict")
                self.assertEqual(service["NoNewPrivileges"], "yes")
                self.assertEqual(service["EnvironmentFile"], f"/etc/default/{binary}")
                for key, value in extra.items():
                    self.assertEqual(service[key], value)
                flags = used_flags(self.env_args(f"{binary}.env", var))
                self.assertLessEqual(flags, help_flags(binary))
                self.assertTrue(flags, "the env file passes flags")
        worker = self.env_args("prepflow-worker.env", "PREPFLOW_WORKER_ARGS")
        self.assertEqual(worker[worker.index("--data-root") + 1], "/data")

    def test_units_are_tls_and_role_tokens_by_default(self):
        # Every file the flags name is a credential the unit loads; workers
        # and jobs hold separate tokens (the scheduler takes no shared one).
        tokens = {"prepflow-worker": {"--auth-token-file": "job-token",
                                      "--worker-token-file": "worker-token"},
                  "prepflow-scheduler": {"--worker-token-file": "worker-token",
                                         "--job-token-file": "job-token"}}
        for binary, var in (("prepflow-worker", "PREPFLOW_WORKER_ARGS"),
                            ("prepflow-scheduler", "PREPFLOW_SCHEDULER_ARGS")):
            with self.subTest(unit=binary):
                args = self.env_args(f"{binary}.env", var)
                self.assertNotIn("--insecure", args)
                for flag in ("--tls-cert", "--tls-key", *tokens[binary]):
                    self.assertIn(flag, args)
                unit = (DEPLOY / "systemd" / f"{binary}.service").read_text()
                loaded = set(re.findall(r"^LoadCredential=([^:]+):", unit, re.M))
                prefix = f"/run/credentials/{binary}.service/"
                for i, a in enumerate(args):
                    if a.startswith("--tls-") or a.endswith("-token-file"):
                        path = args[i + 1]
                        self.assertTrue(path.startswith(prefix), path)
                        self.assertIn(path[len(prefix):], loaded)
                    if a in tokens[binary]:
                        self.assertEqual(args[i + 1], prefix + tokens[binary][a])
                if binary == "prepflow-scheduler":
                    # Its lease key lives in its own state directory.
                    key = args[args.index("--lease-key-file") + 1]
                    state = re.search(r"^StateDirectory=(.*)$", unit, re.M).group(1)
                    self.assertEqual(key, f"/var/lib/{state}/lease-key")


class Prometheus(unittest.TestCase):
    def test_rules_and_dashboard_query_only_exported_series(self):
        exported = exported_series()
        rules = yaml.safe_load((DEPLOY / "prometheus/rules.yml").read_text())
        recorded = set()
        for group in rules["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    recorded.add(rule["record"])
                missing = queried_series(rule["expr"]) - exported - recorded
                self.assertFalse(missing, f'{rule.get("alert") or rule.get("record")}: {missing}')
        dashboard = json.loads((DEPLOY / "grafana/prepflow.json").read_text())
        exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        exprs += [v["query"]["query"] for v in dashboard["templating"]["list"]
                  if v["type"] == "query"]
        self.assertGreater(len(exprs), 20)
        for expr in exprs:
            self.assertFalse(queried_series(expr) - exported, expr)

    def test_dashboard_is_the_generator_output_and_well_formed(self):
        subprocess.run([sys.executable, DEPLOY / "grafana/make_dashboard.py", "--check"], check=True)
        dashboard = json.loads((DEPLOY / "grafana/prepflow.json").read_text())
        ids = [p["id"] for p in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        titles = {p["title"] for p in dashboard["panels"] if p["type"] == "row"}
        self.assertEqual(titles, {"Jobs", "Workers", "Scheduler"})
        for p in dashboard["panels"]:
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])

    @unittest.skipIf(shutil.which("promtool") is None, "promtool absent (Debian 'prometheus')")
    def test_promtool(self):
        d = DEPLOY / "prometheus"
        for args in (["check", "config", "prometheus.yml"], ["check", "rules", "rules.yml"],
                     ["test", "rules", "rules_test.yml"]):
            with self.subTest(args=args):
                r = subprocess.run(["promtool", *args], cwd=d, capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class Dockerfile(unittest.TestCase):
    def test_two_bookworm_stages_with_every_runtime_library(self):
        text = (DEPLOY / "Dockerfile").read_text()
        stages = re.findall(r"^FROM (\S+) AS (\w+)", text, re.M)
        self.assertEqual([s[1] for s in stages], ["build", "runtime"])
        self.assertTrue(all("bookworm" in s[0] for s in stages), stages)
        self.assertIn("COPY --from=build", text)
        runtime = text[text.index("AS runtime"):]
        installed = set(re.findall(r"\b(lib[a-z0-9.+-]+)\b", runtime))
        for binary in ("prepflow", "prepflow-worker", "prepflow-scheduler"):
            self.assertIn(f"/src/build/bin/{binary}", runtime)
        if shutil.which("dpkg") is None or shutil.which("readelf") is None:
            self.skipTest("no dpkg/readelf to map libraries to packages")
        needed = set()
        for binary in ("prepflow", "prepflow-worker", "prepflow-scheduler"):
            out = subprocess.run(["readelf", "-d", BIN / binary], capture_output=True, text=True,
                                 check=True).stdout
            needed |= set(re.findall(r"\(NEEDED\).*\[(.+)\]", out))
        # A sanitizer build links its runtime; the image is built without one,
        # and every other library is the same.
        needed = {lib for lib in needed if not re.match(r"lib(a|ub|t|l)san\.so", lib)}
        self.assertTrue(needed)
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        base = {"libc6", "libgcc-s1", "libstdc++6"}  # in every Debian image
        # What apt installs with the packages the runtime stage names (a build
        # that links without --as-needed, as the sanitizer one does, names
        # their dependencies' libraries directly).
        installed = dependency_closure(installed)
        for lib in sorted(needed):
            with self.subTest(library=lib):
                m = re.search(rf"^\s*{re.escape(lib)} .*=> (\S+)$", cache, re.M)
                self.assertIsNotNone(m, f"{lib}: not in the linker cache (ldconfig -p)")
                package = owner_package(m.group(1))
                self.assertIsNotNone(package, f"{lib} ({m.group(1)}): no package owns it")
                if package not in base:
                    self.assertIn(package, installed, f"{lib} comes from {package}")


def dependency_closure(packages):
    """`packages` and everything they depend on, as installed here."""
    seen, todo = set(), list(packages)
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        seen.add(package)
        out = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", package],
                             capture_output=True, text=True)
        if out.returncode != 0:
            continue
        for alternative in re.split(r"[,|]", out.stdout):
            name = alternative.strip().split(" ")[0].split(":")[0]
            if name:
                todo.append(name)
    return seen


def owner_package(path):
    """The Debian package that installed the file at `path` (a symlink, its
    target, or either under /lib rather than /usr/lib on merged-/usr), or None."""
    link = pathlib.Path(path)
    candidates = [link, link.resolve()]
    candidates += [pathlib.Path(str(c).replace("/usr/lib/", "/lib/", 1)) for c in candidates]
    for candidate in candidates:
        owner = subprocess.run(["dpkg", "-S", str(candidate)], capture_output=True, text=True)
        if owner.returncode == 0:
            return owner.stdout.split(":")[0]
    return None

if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    BIN = pathlib.Path(sys.argv.pop(1), "bin").resolve()
    unittest.main(verbosity=1)
