"""The README is a short guide that opens with the two commands CI runs, every relative link in README.md and
docs/ resolves (file and heading), and the install page's IAM trust policies and kubectl fallback are the ones
the rest of the project uses."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
INSTALL = ROOT / "docs" / "install.md"
# .ci/run installs `.[test]` and runs `pytest -q`: the README's test command, verbatim
PLAN_COMMAND = ("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && gangscale plan --cluster "
                "config/examples/backlog.yaml --nodegroups config/examples/catalog.yaml -o table")
TEST_COMMAND = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest -q"
GUIDE_ORDER = ("## Install", "## Dry-run quick start", "## How it works", "## Choosing a mode", "## Documentation")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def code_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```(?:sh|bash)?\n(.*?)```", text, flags=re.DOTALL)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def documents() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "CHANGELOG.md"]


def test_the_readme_is_a_guide_of_at_most_16_kb():
    assert len(README.read_bytes()) <= 16 * 1024


def test_the_readme_opens_with_the_plan_command_and_the_test_command_ci_runs():
    text = README.read_text()
    assert code_blocks(text)[:2] == [PLAN_COMMAND, TEST_COMMAND]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install --quiet -e '.[test]'" in ci and "\npytest -q\n" in ci


def test_the_readme_sections_come_in_the_guide_order_with_install_on_the_first_screen():
    lines = README.read_text().splitlines()
    at = [lines.index(h) for h in GUIDE_ORDER]
    assert at == sorted(at)
    assert at[0] < 40, "Install is within the first screen"


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_a_heading(doc):
    broken = []
    for m in LINK.finditer(doc.read_text()):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        path = (doc.parent / file_part).resolve() if file_part else doc
        if not path.exists() or anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(target)
    assert broken == []


def _service_account() -> tuple[str, str]:
    sa = yaml.safe_load((ROOT / "config" / "deploy" / "serviceaccount.yaml").read_text())
    return sa["metadata"]["namespace"], sa["metadata"]["name"]


def _filled(name: str, **values: str) -> dict:
    text = (ROOT / "config" / "iam" / name).read_text()
    for key, value in values.items():
        text = text.replace("${" + key + "}", value)
    assert "${" not in text, f"{name}: a placeholder the install page does not set"
    return json.loads(text)


def test_the_irsa_trust_policy_lets_only_the_controller_service_account_assume_the_role():
    ns, name = _service_account()
    doc = _filled("trust-irsa.json", ACCOUNT_ID="123456789012", OIDC_PROVIDER="oidc.eks.us-east-1.amazonaws.com/id/X",
                  NAMESPACE=ns, SERVICE_ACCOUNT=name)
    (stmt,) = doc["Statement"]
    assert stmt["Effect"] == "Allow" and stmt["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert stmt["Principal"] == {"Federated": "arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/X"}
    assert stmt["Condition"] == {"StringEquals": {
        "oidc.eks.us-east-1.amazonaws.com/id/X:sub": f"system:serviceaccount:{ns}:{name}",
        "oidc.eks.us-east-1.amazonaws.com/id/X:aud": "sts.amazonaws.com"}}


def test_the_pod_identity_trust_policy_lets_only_the_controller_service_account_of_the_cluster_assume_the_role():
    ns, name = _service_account()
    doc = _filled("trust-pod-identity.json", CLUSTER_NAME="prod", NAMESPACE=ns, SERVICE_ACCOUNT=name)
    (stmt,) = doc["Statement"]
    assert stmt["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(stmt["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert stmt["Condition"] == {"StringEquals": {"aws:RequestTag/eks-cluster-name": "prod",
                                                  "aws:RequestTag/kubernetes-namespace": ns,
                                                  "aws:RequestTag/kubernetes-service-account": name}}


def test_the_install_page_sets_every_placeholder_of_the_files_it_runs_envsubst_on():
    text = INSTALL.read_text()
    for block in code_blocks(text):
        exported = set(re.findall(r"\b([A-Z_]+)=", " ".join(line for line in block.splitlines()
                                                             if line.lstrip().startswith("export "))))
        for path in re.findall(r"envsubst < (\S+)", block):
            wanted = set(re.findall(r"\$\{([A-Z_]+)\}", (ROOT / path).read_text()))
            earlier = set(re.findall(r"export ([A-Z_]+)=|\b([A-Z_]+)=", text[:text.index(block)]))
            earlier_names = {a or b for a, b in earlier}
            assert wanted <= exported | earlier_names, (path, wanted - exported - earlier_names)


def test_the_install_pages_kubectl_fallback_is_the_one_the_gate_mode_test_runs():
    tested = (ROOT / "docs" / "scheduling.md").read_text()
    tested = tested[tested.index("<!-- gate-fallback -->"):].split("```sh\n", 1)[1].split("```", 1)[0]
    install = INSTALL.read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", install, flags=re.DOTALL) if "schedulingGates/$i" in b)
    assert textwrap.dedent(block).strip() == tested.strip()
