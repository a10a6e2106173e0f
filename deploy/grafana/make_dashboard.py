#!/usr/bin/env python3
"""Writes deploy/grafana/prepflow.json, the Grafana dashboard for prepflow.

The dashboard is generated so that its dozens of panels stay consistent (one
datasource variable, one layout grid, queries that name only exported
series); edit this file and run it, never the JSON. tests/deploy checks that
the JSON is this script's output and that every series it queries exists.

    deploy/grafana/make_dashboard.py [--check]
"""
import json
import pathlib
import sys

OUT = pathlib.Path(__file__).with_name("prepflow.json")
DS = {"type": "prometheus", "uid": "${datasource}"}

JOB = 'job_id=~"$job_id"'
WORKER = 'instance=~"$worker"'


class Layout:
    """Places panels left to right on Grafana's 24-column grid."""

    def __init__(self):
        self.panels = []
        self.x = 0
        self.y = 0
        self.next_id = 1

    def row(self, title):
        if self.x:
            self.x, self.y = 0, self.y + 8
        self.panels.append({"type": "row", "title": title, "id": self.next_id,
                            "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})
        self.next_id += 1
        self.y += 1

    def panel(self, title, description, targets, unit="short", width=8, kind="timeseries",
              stack=False):
        if self.x + width > 24:
            self.x, self.y = 0, self.y + 8
        fields = {"unit": unit, "custom": {}}
        if kind == "timeseries":
            fields["custom"] = {"lineWidth": 1, "fillOpacity": 10 if stack else 0,
                                "stacking": {"mode": "normal" if stack else "none"}}
        self.panels.append({
            "type": kind, "title": title, "description": description, "id": self.next_id,
            "datasource": DS,
            "gridPos": {"h": 8, "w": width, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": fields, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}} if kind == "timeseries" else {},
            "targets": [{"datasource": DS, "expr": expr, "legendFormat": legend,
                         "refId": chr(ord("A") + i)}
                        for i, (expr, legend) in enumerate(targets)],
        })
        self.next_id += 1
        self.x += width


def build():
    d = Layout()
    d.row("Jobs")
    d.panel("Samples delivered",
            "Samples per second each job's trainer received, by where their stages ran.",
            [(f"sum by (job_id, placement) (rate(prepflow_client_samples_total{{{JOB}}}[1m]))",
              "{{job_id}} {{placement}}")], unit="ops", stack=True)
    d.panel("Input-bound time",
            "Share of wall time the trainer waited for data. Above 20% for 10 minutes "
            "fires PrepflowJobInputBound.",
            [(f"rate(prepflow_client_wait_seconds_total{{{JOB}}}[1m])", "{{job_id}}")],
            unit="percentunit")
    d.panel("Plan: predicted vs delivered",
            "What --offload auto's current plan predicts, against what was delivered.",
            [(f"prepflow_client_plan_predicted_samples_per_second{{{JOB}}}",
              "{{job_id}} predicted"),
             (f"sum by (job_id) (rate(prepflow_client_samples_total{{{JOB}}}[1m]))",
              "{{job_id}} delivered")], unit="ops")
    d.panel("Remote fraction and cut",
            "Share of samples with stages on workers, and the cut most of them take "
            "(stages [0, cut) remote).",
            [(f"prepflow_client_remote_fraction{{{JOB}}}", "{{job_id}} remote fraction"),
             (f"prepflow_client_cut{{{JOB}}}", "{{job_id}} cut")])
    d.panel("Worker cores: wanted, fair share, granted",
            "What each rank asked the scheduler for, its part of its job's weighted fair share "
            "of the pool (and the job's whole share), and the cores granted to it now.",
            [(f"prepflow_client_remote_cores{{{JOB}}}", "{{job_id}}/{{rank}} {{kind}}")])
    d.panel("Ingest per worker",
            "Bytes per second each job receives from each of its workers.",
            [(f"rate(prepflow_client_worker_received_bytes_total{{{JOB}}}[1m])",
              "{{job_id}} <- {{worker}}")], unit="Bps", stack=True)
    d.panel("Errors, reissued, hedged and stolen items",
            "Samples that failed, work items moved to another worker after theirs failed, "
            "items copied to an idle worker because theirs was slow (hedging), and echoed "
            "copies an idle worker took from their busy home.",
            [(f"rate(prepflow_client_errors_total{{{JOB}}}[1m])", "{{job_id}} errors"),
             (f"rate(prepflow_client_reissued_items_total{{{JOB}}}[1m])",
              "{{job_id}} reissued"),
             (f"rate(prepflow_client_hedged_items_total{{{JOB}}}[1m])",
              "{{job_id}} hedged"),
             (f"rate(prepflow_client_stolen_items_total{{{JOB}}}[1m])",
              "{{job_id}} stolen")], unit="ops")
    d.panel("Stage CPU by side",
            "CPU seconds per second in each stage, on the trainer (local) and on workers.",
            [(f"sum by (stage, side) (rate(prepflow_client_stage_cpu_seconds_total{{{JOB}}}[1m]))",
              "{{stage}} {{side}}")], stack=True)
    d.panel("Scheduler reachable",
            "1 while the job's heartbeats reach the scheduler.",
            [(f"prepflow_client_scheduler_up{{{JOB}}}", "{{job_id}}"),
             (f"sum by (job_id) (prepflow_client_worker_up{{{JOB}}})", "{{job_id}} workers up")])

    d.panel("Cache hit ratio",
            "Share of samples whose value at the cache boundary came from a sample cache (the "
            "trainer's or a worker's) instead of storage and the stages before it.",
            [(f"sum by (job_id) (rate(prepflow_client_cache_hits_total{{{JOB}}}[5m])) / "
              f"(sum by (job_id) (rate(prepflow_client_cache_hits_total{{{JOB}}}[5m])) + "
              f"sum by (job_id) (rate(prepflow_client_cache_misses_total{{{JOB}}}[5m])))",
              "{{job_id}}")], unit="percentunit")
    d.panel("Storage read",
            "Bytes per second read from remote storage for each job, by its trainer and its "
            "workers together (a cache that holds the data brings it to zero after epoch 1).",
            [(f"rate(prepflow_client_storage_bytes_read_total{{{JOB}}}[1m])", "{{job_id}}"),
             (f"prepflow_client_storage_limit_bytes_per_second{{{JOB}}}",
              "{{job_id}} limit learnt ({{side}})"),
             (f"prepflow_client_ingest_limit_bytes_per_second{{{JOB}}}",
              "{{job_id}} ingest limit learnt")],
            unit="Bps")
    d.panel("Data echoing",
            "Fresh samples (first copies) and echoed ones (later copies of a sample already "
            "loaded) per second, and each job's echo factor (--echo, or --echo auto's choice "
            "for the latest epoch).",
            [(f"rate(prepflow_client_fresh_samples_total{{{JOB}}}[1m])", "{{job_id}} fresh"),
             (f"rate(prepflow_client_echoed_samples_total{{{JOB}}}[1m])", "{{job_id}} echoed"),
             (f"prepflow_client_echo_factor{{{JOB}}}", "{{job_id}} factor")])

    d.row("Workers")
    d.panel("Samples processed",
            "Samples per second each worker ran (for every job).",
            [(f"sum by (instance) (rate(prepflow_worker_samples_total{{{WORKER}}}[1m]))",
              "{{instance}}")], unit="ops", stack=True)
    d.panel("Bytes sent",
            "Result bytes per second each worker streams to trainers.",
            [(f"sum by (instance) (rate(prepflow_worker_sent_bytes_total{{{WORKER}}}[1m]))",
              "{{instance}}")], unit="Bps", stack=True)
    d.panel("Streams and queue",
            "Open job streams, and work items waiting for a thread.",
            [(f"prepflow_worker_active_streams{{{WORKER}}}", "{{instance}} streams"),
             (f"prepflow_worker_queue_depth{{{WORKER}}}", "{{instance}} queued")])
    d.panel("Stage CPU per sample (p50, p95)",
            "Thread CPU seconds per sample of each stage, across the selected workers.",
            [("histogram_quantile(0.5, sum by (le, stage) "
              f"(rate(prepflow_worker_stage_seconds_bucket{{{WORKER}}}[5m])))", "{{stage}} p50"),
             ("histogram_quantile(0.95, sum by (le, stage) "
              f"(rate(prepflow_worker_stage_seconds_bucket{{{WORKER}}}[5m])))", "{{stage}} p95")],
            unit="s")
    d.panel("Sample errors and refused streams",
            "Failed samples by status code, and job streams refused at open.",
            [(f"sum by (code) (rate(prepflow_worker_sample_errors_total{{{WORKER}}}[5m]))",
              "errors {{code}}"),
             (f"sum by (code) (rate(prepflow_worker_refused_streams_total{{{WORKER}}}[5m]))",
              "refused {{code}}")], unit="ops")
    d.panel("Cache held and hit ratio",
            "Bytes each worker's sample cache holds, by tier, and its hit ratio.",
            [(f"prepflow_worker_cache_bytes{{{WORKER}}}", "{{instance}} {{tier}}"),
             (f"rate(prepflow_worker_cache_hits_total{{{WORKER}}}[5m]) / "
              f"(rate(prepflow_worker_cache_hits_total{{{WORKER}}}[5m]) + "
              f"rate(prepflow_worker_cache_misses_total{{{WORKER}}}[5m]))",
              "{{instance}} hit ratio")], unit="bytes")
    d.panel("Workers up",
            "Workers Prometheus can scrape (PrepflowWorkerDown fires after 2 minutes down).",
            [('sum(up{job="prepflow-worker"})', "up"),
             ('count(up{job="prepflow-worker"})', "known")])

    d.row("Scheduler")
    d.panel("Pool", "Workers and jobs the scheduler knows, and its cores: in the pool and granted.",
            [('prepflow_scheduler_pool{what=~"workers|jobs|ranks|pool_cores|granted_cores"}',
              "{{what}}")])
    d.panel("Demand: how big the pool should be",
            "Cores the jobs' plans want, those wanted and not granted (the pool is short: "
            "PrepflowPoolShort fires after 15 minutes), the pool's idle cores, the workers "
            "draining, and what the elastic class should hold (the autoscaler's signal).",
            [('prepflow_scheduler_pool{what=~"wanted_cores|short_cores|idle_cores|'
              'draining_workers"}', "{{what}}"),
             ("prepflow:elastic_wanted_cores", "elastic class target")])
    d.panel("Cost and classes",
            "What each training job's grants cost an hour (workers' --cost-per-core-hour), and "
            "each worker class's cores in the pool and granted.",
            [(f"prepflow_scheduler_job_cost_per_hour{{{JOB}}}", "{{job_id}} per hour"),
             ("prepflow_scheduler_class_cores", "{{class}} {{what}}")])
    d.panel("Fair shares: jobs and their ranks",
            "Each training job's fair share of the pool (weights apply per job, however many "
            "ranks it has), and each rank's part of it (max-min by what the ranks want).",
            [(f"prepflow_scheduler_job_share_cores{{{JOB}}}", "{{job_id}}"),
             (f"prepflow_scheduler_rank_share_cores{{{JOB}}}", "{{job_id}} rank {{rank}}")])
    d.panel("Heartbeats", "Heartbeats per second, from workers and from jobs.",
            [("sum by (kind) (rate(prepflow_scheduler_heartbeats_total[1m]))", "{{kind}}")],
            unit="ops")
    d.panel("Rebalance time (p99) and expiries",
            "Time to recompute the allocation, and workers or jobs dropped for silence.",
            [("histogram_quantile(0.99, sum by (le) "
              "(rate(prepflow_scheduler_rebalance_seconds_bucket[5m])))", "rebalance p99"),
             ("sum by (kind) (increase(prepflow_scheduler_expired_total[5m]))",
              "expired {{kind}} / 5m")], unit="s")

    def variable(name, label, query):
        return {"name": name, "label": label, "type": "query", "datasource": DS,
                "query": {"query": query, "refId": name}, "definition": query,
                "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
                "current": {"text": "All", "value": "$__all"}, "sort": 1}

    return {
        "title": "prepflow",
        "uid": "prepflow",
        "description": "Training jobs' input pipelines, the worker pool and the scheduler.",
        "tags": ["prepflow"],
        "schemaVersion": 38,
        "version": 1,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0},
            variable("job_id", "Job", "label_values(prepflow_client_samples_total, job_id)"),
            variable("worker", "Worker",
                     "label_values(prepflow_worker_samples_total, instance)"),
        ]},
        "panels": d.panels,
    }


def main():
    text = json.dumps(build(), indent=2) + "\n"
    if "--check" in sys.argv[1:]:
        if OUT.read_text() != text:
            sys.exit(f"{OUT} is stale: run {sys.argv[0]}")
        return
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
