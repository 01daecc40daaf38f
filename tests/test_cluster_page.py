"""The GPU-cluster page (docs/cluster.md) says what cluster.yaml does: its commands name the
file, its node types, image and storage root are the file's."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parents[1]
PAGE = PROJECT / "docs" / "cluster.md"


def _page() -> str:
    return PAGE.read_text()


def test_the_cluster_page_matches_cluster_yaml():
    section, cluster = _page(), yaml.safe_load((PROJECT / "cluster.yaml").read_text())
    nodes = cluster["available_node_types"]
    for name, node in nodes.items():
        assert node["node_config"]["InstanceType"] in section, name
        if name != cluster["head_node_type"]:
            assert f"up to {node['max_workers']} `{node['node_config']['InstanceType']}`" in section
    assert cluster["docker"]["image"].rsplit("-", 1)[0] in section  # rayproject/ray:<v>-py311
    assert cluster["provider"]["region"] in section
    mount = re.search(r"-v (\S+):", " ".join(cluster["docker"]["run_options"])).group(1)
    assert f"--store {mount}" in section and "`--address auto`" in section
    assert "fs-0123456789abcdef0" in section and "fs-0123456789abcdef0" in str(
        cluster["initialization_commands"]
    )
    for verb in ("up", "exec", "attach", "dashboard", "rsync-down", "down"):
        assert f"ray {verb} cluster.yaml" in section, verb
    assert "tune-lowmem resume" in section and "pip install --quiet -e ~/tune-lowmem" in str(
        cluster["setup_commands"]
    )


def test_gpu_workers_ask_for_nothing_the_instance_does_not_have():
    nodes = yaml.safe_load((PROJECT / "cluster.yaml").read_text())["available_node_types"]
    gpu_nodes = [
        n for n in nodes.values() if n["node_config"]["InstanceType"].startswith(("g5", "p4d"))
    ]
    assert len(gpu_nodes) >= 1 and all(n["resources"] == {} for n in gpu_nodes)
