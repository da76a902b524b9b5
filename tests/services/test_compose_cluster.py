"""compose.yaml's `cluster` profile: three Qdrant peers in distributed mode and an API pointed at them."""

from __future__ import annotations

from pathlib import Path

import yaml

from culturebase.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_cluster_profile_structure():
    doc = yaml.safe_load((REPO / "compose.yaml").read_text())
    services = doc["services"]
    nodes = [services[f"qdrant-node-{i}"] for i in range(3)]
    for i, node in enumerate(nodes):
        assert node["profiles"] == ["cluster"] and node["image"].startswith("qdrant/qdrant:")
        assert node["environment"]["QDRANT__CLUSTER__ENABLED"] == "true"
        assert node["environment"]["QDRANT__SERVICE__API_KEY"].startswith("${QDRANT_API_KEY:?")
        assert f"qdrant-node-{i}:/qdrant/storage" in node["volumes"] and f"qdrant-node-{i}" in doc["volumes"]
        assert "6335" in node["expose"] and "readyz" in str(node["healthcheck"]["test"])
        cmd = node["command"]
        assert cmd[cmd.index("--uri") + 1] == f"http://qdrant-node-{i}:6335"
        if i == 0:
            assert "--bootstrap" not in cmd
        else:  # the others join through the first peer, once it is ready
            assert cmd[cmd.index("--bootstrap") + 1] == "http://qdrant-node-0:6335"
            assert node["depends_on"]["qdrant-node-0"]["condition"] == "service_healthy"
    api = services["api-cluster"]
    assert api["profiles"] == ["cluster"] and api["command"] == ["kar", "serve"]
    assert {f"qdrant-node-{i}" for i in range(3)} == set(api["depends_on"])
    env = api["environment"]
    assert env["KAR_QDRANT_URL"] == "http://qdrant-node-0:6333"
    assert env["KAR_QDRANT_REPLICATION_FACTOR"] == "${KAR_QDRANT_REPLICATION_FACTOR:-2}"
    assert env["KAR_QDRANT_SHARDS"].startswith("${KAR_QDRANT_SHARDS:-")
    assert env["KAR_API_KEYS"].startswith("${KAR_API_KEYS:?")
    # the defaults it sets are valid settings (replication 2: reads survive one node down)
    s = Settings(qdrant_url=env["KAR_QDRANT_URL"], qdrant_shards=6, qdrant_replication_factor=2, qdrant_write_consistency=1)
    assert s.qdrant_replication_factor == 2
    # the default stack is untouched by the profile
    assert "profiles" not in services["qdrant"] and "profiles" not in services["api"]
    published = {p.split(":")[-2] for svc in ("api", "api-cluster") for p in services[svc]["ports"]}
    assert len(published) == 2, "the two APIs must not publish the same host port"
