# Data: the tiny config generates its data sets from its seed; data.hub.sets prepares sets from their sources
# (Hugging Face data sets, downloaded once on the login node, or local files), one job per set, in place of
# the generated ones where both are configured. data_file (rules/common.smk) says where each set is.
from stages.data.prepare import rejects_file


if GENERATED_SETS:

    rule tiny_data:
        output:
            expand(data_file("{name}"), name=GENERATED_SETS),
            manifest=result("data", "manifest.json"),
        log:
            log_file("tiny_data"),
        benchmark:
            benchmark_file("tiny_data")
        params:
            seed=config["seed"],
            out=lambda wildcards, output: os.path.dirname(output.manifest),
            args=stage_args(config["data"]["tiny"]),
            # the sets prepared from sources are not generated (flags only then: the tiny config's command stays)
            sets=f"--sets {' '.join(GENERATED_SETS)}" if len(GENERATED_SETS) < len(TINY_DATA_FILES) else "",
        localrule: True
        container:
            image("cpu")
        shell:
            "python -m stages.data.tiny --output_dir {params.out} --seed {params.seed} {params.args} {params.sets}"
            " > {log} 2>&1"


if PREPARED_SETS:

    rule prepare_data:
        # Hub sources need internet: a local rule (the login node). A target prepares only the sets it reads.
        input:
            unpack(prepare_data_input),
        output:
            rows=os.path.join(prepared_dir("{set}"), "{set}.parquet"),
            rejects=os.path.join(prepared_dir("{set}"), rejects_file("{set}")),
            manifest=os.path.join(prepared_dir("{set}"), "manifest.json"),
        log:
            log_file("prepare_data/{set}"),
        benchmark:
            benchmark_file("prepare_data/{set}")
        wildcard_constraints:
            set="|".join(PREPARED_SETS),
        params:
            online=ONLINE,
            seed=config["seed"],
            out=lambda wildcards, output: os.path.dirname(output.manifest),
            sources=lambda wildcards: shlex.quote(json.dumps({wildcards.set: config["data"]["hub"]["sets"][wildcards.set]})),
            eval_data=lambda wildcards, input: f"--eval_data {' '.join(input.eval_sets)}" if input.eval_sets else "",
            args=stage_args(config["data"]["hub"], exclude=("sets",)),
        localrule: True
        container:
            image("cpu")
        shell:
            "{params.online} python -m stages.data.prepare --output_dir {params.out} --sources {params.sources}"
            " {params.eval_data} --seed {params.seed} {params.args} > {log} 2>&1; tail -n 1 {log}"  # kept, dropped
