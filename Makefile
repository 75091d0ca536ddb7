# make html | make test | make lab | make gpu-check   (see README.md)
SHELL := /bin/bash
.DEFAULT_GOAL := help

# An active virtual or conda environment (not conda's base) is used as it is;
# otherwise a .venv is created here.
ifneq ($(VIRTUAL_ENV),)
  ENV_DIR := $(VIRTUAL_ENV)
else ifneq ($(and $(CONDA_PREFIX),$(filter-out base,$(CONDA_DEFAULT_ENV))),)
  ENV_DIR := $(CONDA_PREFIX)
else
  ENV_DIR := .venv
endif
PYTHON := $(ENV_DIR)/bin/python
INSTALLED := $(ENV_DIR)/.nccl-notebooks-installed
PYTEST_ARGS ?=

.PHONY: help install install-mpi install-slurm slurm-check html slides student test test-quick lint lab gpu-check images bench compare shared-cells i18n-update notebooks-zh lab-zh student-zh slides-zh clean

help:
	@echo "make html        execute every notebook, write build/html/index.html (and the"
	@echo "                 Chinese site, build/html/zh_CN/index.html, from the same run)"
	@echo "                 (one set of engines per world size and lane; COLD=1: new ones per"
	@echo "                 notebook; JOBS=1: one notebook at a time, default 2 on 2+ cores;"
	@echo "                 LANGUAGES=en: the English site alone)"
	@echo "make slides      reveal.js slides of the executed notebooks (after make html)"
	@echo "make student     student copies without exercise solutions, in build/student"
	@echo "make install-mpi mpi4py, for TUTORIAL_LAUNCHER=mpi (Open MPI from your OS)"
	@echo "make install-slurm  Slurm and munge from Debian/Ubuntu's packages (as root)"
	@echo "make slurm-check notebooks on a one-node Slurm started here, then stopped"
	@echo "make test        the whole test suite (real kernels and engines, gloo on CPU)"
	@echo "make test-quick  the suite without the slow notebook executions"
	@echo "make lint        ruff (pyflakes rules) over the code and the notebooks' cells"
	@echo "make lab         JupyterLab with the project's kernel"
	@echo "make gpu-check   the NCCL path, on a machine with GPUs"
	@echo "make images      redraw images/ from the NumPy models"
	@echo "make bench       notebook path against torchrun: busbw, latency, start (ratios);"
	@echo "                 the hand-built training steps against torch's own"
	@echo "make compare A=dir B=dir  two machines' build folders on one page"
	@echo "make shared-cells  rewrite the repeated cells from tools/shared_cells/*.md"
	@echo "make i18n-update the Chinese catalogs (locales/zh_CN) follow the English pages"
	@echo "make notebooks-zh  the Chinese notebooks (build/zh_CN/notebooks), kit and run pages"
	@echo "make lab-zh      JupyterLab on the Chinese notebooks (中文笔记本)"
	@echo "make student-zh  the student copies in Chinese, in build/zh_CN/student"
	@echo "make slides-zh   the slides in Chinese (after make html), in build/zh_CN/slides"
	@echo "(environment: $(ENV_DIR))"

$(ENV_DIR)/bin/python:
	python3 -m venv $(ENV_DIR)

# rfc3987-syntax comes only with jupyter-events' jsonschema[format-nongpl] extra. jsonschema
# imports it when present, and it builds its parsers at import: 1.4 s in every process that
# imports nbformat (python-jsonschema/jsonschema#1428). It checks only the "iri" formats,
# which no schema we load uses (tests/tools/test_repo.py), so it is removed.
# tools/install.py: pip's install, done by uv with pip's settings (3x faster here).
$(INSTALLED): requirements.txt pyproject.toml | $(ENV_DIR)/bin/python
	$(PYTHON) -m tools.install -r requirements.txt -e .
	$(PYTHON) -m pip uninstall --quiet --disable-pip-version-check -y rfc3987-syntax
	@touch $@

install: $(INSTALLED)

# The mpi launcher (TUTORIAL_LAUNCHER=mpi) needs Open MPI (apt-get install openmpi-bin
# libopenmpi-dev) and mpi4py in the environment.
install-mpi: $(INSTALLED)
	$(PYTHON) -m tools.install mpi4py==4.1.2

# A one-node Slurm on this machine (tools/slurm/, as root): the slurm launcher's
# tests start it, run notebooks on engines that sbatch/srun start, and stop it again.
install-slurm:
	python3 -m tools.slurm install

slurm-check: $(INSTALLED) install-slurm
	TUTORIAL_REQUIRE_SLURM=1 $(PYTHON) -m pytest tests/runtime/test_slurm_launcher.py -n 0 \
		--durations=0 $(PYTEST_ARGS)

html: $(INSTALLED)
	$(PYTHON) -m tools.build $(if $(COLD),--cold)$(if $(JOBS), --jobs $(JOBS))$(if $(LANGUAGES), --languages $(LANGUAGES))

slides: html
	$(PYTHON) -m tools.classroom slides

student: $(INSTALLED)
	$(PYTHON) -m tools.classroom student

student-zh: $(INSTALLED)
	$(PYTHON) -m tools.classroom student --language zh_CN

slides-zh: html
	$(PYTHON) -m tools.classroom slides --language zh_CN

test: lint
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-quick: lint
	$(PYTHON) -m pytest -m "not notebook" $(PYTEST_ARGS)

lint: $(INSTALLED)
	$(PYTHON) -m tools.lint

# JupyterLab on loopback only (the browser needs HTTP: 127.0.0.1, a token), its kernels on
# unix sockets (--KernelManager.transport=ipc) in Jupyter's owner-only runtime folder, and
# every file it creates private (umask 077). Jupyter refuses to start as root without
# --allow-root (containers, classroom VMs run as root); the flag changes nothing for other
# users. The kernel is registered once, when the environment is installed, so a user who
# may not write to a shared environment can still run `make lab` from it.
# LAB_PORT, LAB_TOKEN (default: Jupyter generates one and prints the URL) and LAB_ARGS
# (more jupyterlab options, e.g. --no-browser) pass through. LAB_CONFIG goes first on
# JUPYTER_CONFIG_PATH: its jupyter_server_config.py keeps ipyparallel's Clusters panel
# but not the logs of the notebooks' engines and controller in this terminal.
LAB_PORT ?= 8888
LAB_TOKEN ?=
LAB_ARGS ?=
LAB_DIR ?= notebooks
LAB_CONFIG := $(CURDIR)/tools/lab
KERNEL_SPEC := $(ENV_DIR)/share/jupyter/kernels/nccl-notebooks/kernel.json

$(KERNEL_SPEC): $(INSTALLED)
	$(PYTHON) -m ipykernel install --sys-prefix --name nccl-notebooks \
		--display-name "Python (nccl-notebooks)"

# A unix socket's path holds at most 107 bytes: the kernels' must fit, or they cannot start.
LAB_SOCKET_CHECK := import sys; from jupyter_core.paths import jupyter_runtime_dir as folder; \
	n = len(folder()) + len("/kernel-00000000-0000-0000-0000-000000000000-ipc-99"); \
	n <= 107 or sys.exit(f"make lab: the kernels\x27 unix sockets in {folder()} would have " \
	f"paths of {n} > 107 characters: set JUPYTER_RUNTIME_DIR to a shorter folder")

lab: $(KERNEL_SPEC)
	@$(PYTHON) -c '$(LAB_SOCKET_CHECK)'
	umask 077 && JUPYTER_CONFIG_PATH="$(LAB_CONFIG)$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		exec $(PYTHON) -m jupyterlab --ip=127.0.0.1 --port=$(LAB_PORT) \
		--ServerApp.allow_root=True --KernelManager.transport=ipc \
		$(if $(LAB_TOKEN),--IdentityProvider.token=$(LAB_TOKEN)) $(LAB_ARGS) $(LAB_DIR)

# The Chinese notebooks (written first), in JupyterLab.
lab-zh: notebooks-zh
	$(MAKE) lab LAB_DIR="$$($(PYTHON) -c 'from helpers.paths import build_dir; \
		print(build_dir() / "zh_CN" / "notebooks")')"

gpu-check: $(INSTALLED)
	$(PYTHON) -m tools.gpu_check

images: $(INSTALLED)
	$(PYTHON) -m helpers.figures.drawings

bench: $(INSTALLED)
	$(PYTHON) benchmarks/notebook_vs_torchrun.py
	$(PYTHON) benchmarks/training_bench.py

# A and B: build folders (results/ and bench/ inside) of two machines; NAMES="laptop gpu".
compare: $(INSTALLED)
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make compare A=build-folder B=build-folder" \
		"[NAMES='laptop gpu-node'] [OUT=build/compare.html]" >&2; exit 2; }
	$(PYTHON) -m tools.compare "$(A)" "$(B)" $(if $(NAMES),--names $(NAMES)) \
		$(if $(OUT),--out "$(OUT)")

i18n-update: $(INSTALLED)
	$(PYTHON) -m tools.i18n update
	$(PYTHON) -m tools.i18n readme

notebooks-zh: $(INSTALLED)
	$(PYTHON) -m tools.i18n notebooks

shared-cells: $(INSTALLED)
	$(PYTHON) -m tools.shared_cells

clean:
	rm -rf build
