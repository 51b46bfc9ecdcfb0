"""How the quick-start test reads README.md's ```sh block (tests/support/quickstart.py)."""

from __future__ import annotations

import pytest

from tests.support.quickstart import (
    QuickStartError,
    option,
    quickstart_block,
    readme_commands,
    split_commands,
    words,
)

BLOCK = """\
# a comment
echo one

cat > v.yaml <<'YAML'
a: 1

# kept: inside the heredoc
YAML
helm upgrade --install x \\
  oci://example/chart \\
  -n ns -f v.yaml
"""


def test_commands_keep_heredocs_and_continuations() -> None:
    assert split_commands(BLOCK) == [
        "echo one",
        "cat > v.yaml <<'YAML'\na: 1\n\n# kept: inside the heredoc\nYAML",
        "helm upgrade --install x \\\n  oci://example/chart \\\n  -n ns -f v.yaml",
    ]
    helm = split_commands(BLOCK)[2]
    assert words(helm)[:4] == ["helm", "upgrade", "--install", "x"]
    assert option(helm, "-f", "--values") == "v.yaml"


def test_unfinished_commands_are_errors() -> None:
    with pytest.raises(QuickStartError, match="heredoc YAML is never closed"):
        split_commands("cat > v.yaml <<'YAML'\na: 1\n")
    with pytest.raises(QuickStartError, match="continuation"):
        split_commands("helm install x \\\n")
    with pytest.raises(QuickStartError, match="no -t"):
        option("docker push x", "-t")


def test_the_section_has_one_sh_block() -> None:
    text = "# T\n\n## Quick start\n\n```sh\necho a\n```\n\n```sh\necho b\n```\n## Next\n"
    with pytest.raises(QuickStartError, match="2 ```sh blocks"):
        quickstart_block(text)
    assert quickstart_block(text.replace("```sh\necho b\n```\n", "")) == "echo a\n"
    with pytest.raises(QuickStartError, match="no section"):
        quickstart_block("# T\n")


def test_the_readme_quick_start_is_read() -> None:
    commands = readme_commands()
    heads = [" ".join(c.split()[:2]) for c in commands]
    # The integration test runs these; the ones it skips by rule must be there to skip.
    assert heads[:2] == ["docker build", "docker push"]
    assert "helm upgrade" in heads
    assert "helm test" in heads
