# A stand-in for python:3.11-slim-bookworm built from Debian's packages only, for
# machines that cannot pull from Docker Hub (docker/bases.sh builds it). Its
# contract is what the images of this repository expect from their base:
# `python` and `pip` (Python 3.11) on PATH, installing into a virtual environment
# that root owns, and nothing else.
ARG DEBIAN_BASE=scalebench-debian:bookworm
FROM ${DEBIAN_BASE}

RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       python3=3.11.* python3-venv=3.11.* \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/python

ENV PATH=/opt/python/bin:$PATH \
    LANG=C.UTF-8
CMD ["python3"]
