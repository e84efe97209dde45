"""``create-benchmark-runner NAME``: generate ``NAME-runner/``, a working, tested, updatable runner repo."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .generator import NAME_RULE, PAYLOAD_TYPES, RunnerSpec, ScaffoldError, generate, update


def _fail(message: str) -> None:
    raise click.ClickException(message)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("name", required=False)
@click.option(
    "--dest",
    type=click.Path(path_type=Path, file_okay=False),
    help="Directory to generate into (default: ./NAME-runner).",
)
@click.option(
    "--payload-type", type=click.Choice(PAYLOAD_TYPES), default=None, help="What answers are sent as."
)
@click.option("--description", default=None, help="One line saying what the benchmark measures.")
@click.option(
    "--class-name",
    default=None,
    help="Prefix of the generated class names (default: CamelCase of NAME, e.g. my-bench -> MyBench).",
)
@click.option(
    "--dependency",
    "dependencies",
    multiple=True,
    metavar="SPEC",
    help="Extra PEP 508 requirement of the runner (repeatable), e.g. --dependency 'torch>=2.4'.",
)
@click.option(
    "--demo-model",
    default=None,
    help="The offline model `make docker-run` runs by default (default: the template's 'oracle').",
)
@click.option(
    "--library-source",
    default=None,
    metavar="PATH|URL",
    help="Where the runner's `make install` gets this project's library: a checkout of benchmark-runner, "
    "a git URL (git+https://HOST/REPO@REF) or a directory of its wheels (default: where the running "
    "library was installed from); a path is taken from the current directory. Recorded in "
    ".copier-answers.yml; never a package index.",
)
@click.option("--defaults", is_flag=True, help="Never prompt: use defaults for every unanswered question.")
@click.option("--dry-run", is_flag=True, help="List the files that would be written; write nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Generate into a non-empty directory: template-owned files are overwritten, existing "
    "author-owned files (benchmark.py, service.py, data, tests/test_runner.py, README.md) are kept.",
)
@click.option(
    "--update",
    "update_dir",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    default=None,
    help="Instead of generating, bring template changes into this generated repo (copier update; "
    "needs a clean git tree).",
)
def cli(
    name: str | None,
    dest: Path | None,
    payload_type: str | None,
    description: str | None,
    class_name: str | None,
    dependencies: tuple[str, ...],
    demo_model: str | None,
    library_source: str | None,
    defaults: bool,
    dry_run: bool,
    force: bool,
    update_dir: Path | None,
) -> None:
    """Generate NAME-runner/: a benchmark runner repo that runs, tests and containerises as generated.

    NAME: lowercase letters, digits and hyphens, starting with a letter (e.g. my-bench). The Python
    package is NAME with '-' -> '_' plus '_runner' (my_bench_runner).
    """
    if update_dir is not None:
        if (
            name
            or dest
            or dry_run
            or force
            or payload_type
            or description
            or class_name
            or dependencies
            or demo_model
        ):
            _fail("--update takes no NAME and no other option than --library-source")
        try:
            ref = update(update_dir, new_library_source=library_source, cwd=Path.cwd())
        except ScaffoldError as exc:
            _fail(str(exc))
        click.echo(f"Updated {update_dir} to template {ref.ref}; review `git diff` and commit.")
        return
    if not name:
        _fail(f"missing NAME: the benchmark name ({NAME_RULE})")
        return
    interactive = not defaults and sys.stdin.isatty()
    try:
        RunnerSpec.build(name)  # validate the name before asking anything
        if interactive and description is None:
            description = click.prompt("Description", default=f"Runner for the {name} benchmark")
        if interactive and payload_type is None:
            payload_type = click.prompt("Payload type", type=click.Choice(PAYLOAD_TYPES), default="text")
        spec = RunnerSpec.build(
            name, description, payload_type or "text", dependencies, class_name, demo_model, library_source
        )
        target = dest if dest is not None else Path.cwd() / spec.repo_name
        result = generate(spec, target, force=force, dry_run=dry_run, cwd=Path.cwd())
    except ScaffoldError as exc:
        _fail(str(exc))
        return
    if dry_run:
        click.echo(f"Would write {len(result.files)} files into {result.dest}:")
    else:
        click.echo(f"Wrote {len(result.files)} files into {result.dest}:")
    for path in result.files:
        click.echo(f"  {path}")
    if not dry_run:
        click.echo(
            f"\nNext: cd {result.dest} && make install && make test\n"
            f"Edit {spec.package_name}/benchmark.py (tasks, prompt) and {spec.package_name}/service.py (checker)."
        )


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
