"""MaxText (JAX/XLA): TrainingSpec framework "maxtext", launch files by planner/emit/maxtext.py."""

from __future__ import annotations

from planner.stacks.base import Stack
from planner.stacks.rules import embedding_loss_units_split, interleaved_microbatches, uneven_stages_split_into_vpp

# MaxText's remat_policy 'custom' tensor names (MT:configs/base.yml, "If custom remat_policy is chosen ...") this
# planner sizes (memory.maxtext_custom_remat_elems)
REMAT_TENSORS = ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "qkv_proj", "out_proj", "context",
                 "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo")
# the tensors remat_policy "minimal" keeps (MT:layers/decoders.py at 3eb77db, Decoder.minimal_policy:
# jax.checkpoint_policies.save_only_these_names over these names)
REMAT_MINIMAL_KEEPS = ("query_proj", "value_proj", "key_proj", "qkv_proj", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi",
                       "mlpwo")

STACK = Stack(
    name="MaxText",
    framework="maxtext",
    covers=("MaxText", "JAX/XLA FSDP"),
    emitter="maxtext",
    # the runtime's own buffers (XLA preallocation aside); was calibration.FRAMEWORK_OVERHEAD_GIB["maxtext"]
    overhead_gib=1.0,
    # MaxText's cross_entropy_with_logits on fp32-cast logits (cast_logits_to_fp32) inside one jitted step: XLA fuses
    # the cast, the log-softmax and its backward into the logits' producer and consumers, leaving the bf16 logits and
    # their bf16 gradient (2 + 2 B), the accounting of a fused loss kernel (not measured on TPU; XLA on CPU assigns
    # 4.6 B per logit of temporaries to MaxText's loss at 2048 tokens x 8192 vocab, jax memory_analysis)
    logit_bytes=4.0,
    loss_parallel_logit_bytes=None,  # its loss is the same computation whatever the sharding (logit_bytes)
    # AQT/Qwix FP8 quantize inside the jitted step: XLA schedules the casts' outputs as temporaries (not measured)
    fp8_weight_cache=False,
    fp8_param_gather_option=False,  # the fsdp axis gathers the weight_dtype parameters (no FP8 all-gather switch)
    fp8_param_gather_offload_recipes=None,  # no FP8 primary weights (fp8_param_gather_option)
    full_iteration_cuda_graph_option=False,  # XLA compiles the step: no per-kernel host launches to remove
    # its quantization configs (AQT / Qwix) quantize the dense layers' dot_generals; an FP8 attention core is not
    # modelled for it
    fp8_attention_option=False,
    # the planner's MaxText layouts keep each expert whole on its expert shard; a null etp is read as 1
    etp_default="one",
    # the mesh's expert axis is ici_expert_parallelism x dcn_expert_parallelism, both 1 unless the config sets them
    # (MT:configs/base.yml at 3eb77db: "ici_expert_parallelism: 1", "dcn_expert_parallelism: 1"); a MaxText benchmark
    # config (benchmarks/maxtext_*_model_configs.py) names every axis it changes, e.g. deepseek3_671b_v5p_1024 only
    # ici_fsdp_parallelism -1: its 256 experts are sharded over the fsdp axis, gathered whole on every chip
    ep_unset_is_one=True,
    # RoutedMoE's wi_0 / wi_1 / wo are each one parameter of shape (num_experts, emb, mlp) / (num_experts, mlp, emb),
    # sharded ("exp", "embed_no_exp", "mlp") (MT:layers/moe.py at 3eb77db RoutedMoE.__init__): the fsdp axis gathers
    # the whole array, every local expert at once
    moe_experts_stacked=True,
    grad_reduce_dtype="fp32",  # MaxText base.yml grad_dtype float32
    grad_buffer_in_reduce_dtype=False,  # replicated gradients in the compute dtype, as PyTorch's .grad
    # jax.grad's cotangents are in the parameter dtype; MaxText casts only float32 ones to grad_dtype
    # (MT:trainers/pre_train/train.py train_step; maxtext@9f1820b4, the v6e recipes' commit, has no grad_dtype)
    grads_in_param_dtype=True,
    zero3_fp32_sharded_params=True,  # fp32 parameters sharded over the fsdp axis (weight_dtype float32)
    fp8_saves_gemm_inputs=False,  # AQT/Qwix fp8: the planner counts saved inputs at 2 B
    selective_saves="half",  # remat policy "minimal"-like: about half the layer's tensors (not measured)
    eager_swiglu_keeps_act=False,  # XLA fuses the activation into its consumers
    norm_keeps_rstd=False,  # XLA fuses the norm (its statistics are recomputed or fused away)
    caching_allocator=False,  # XLA assigns every buffer at compile time: reserved = allocated
    launch_loss_chunks=1,  # the loss over the whole micro-batch
    compile_fuses_loss=False,  # no --compile
    chunked_loss_option=True,  # num_vocab_tiling (MT:configs/base.yml)
    zero3_resident_per_matrix=True,  # XLA: one all-gather / reduce-scatter per weight array (see memory.zero3_buffers)
    custom_remat_option=True,  # remat_policy: custom (MT:configs/base.yml)
    activation_offload_modules=(),  # Megatron's module offloading; MaxText offloads named tensors (custom remat)
    # searched beside full recompute, the policies tpu-recipes' MaxText recipes run (MT:configs/base.yml remat_policy
    # custom; the copies priced at the host link, compute.activation_offload_s; the re-runs,
    # compute.custom_remat_recompute_s; runs/known_runs_tpu_dev.yaml): each layer's input offloaded, the rest
    # rematerialised (Llama 3.1 405B on two v6e-256 slices); with the q / k / v projections (Llama 3.1 70B on v6e-32 /
    # 64); and the output projection too (Llama 3.1 8B on v6e-8 .. 128)
    searched_remat_offloads=(("decoder_layer_input",),
                             ("decoder_layer_input", "query_proj", "key_proj", "value_proj"),
                             ("decoder_layer_input", "query_proj", "key_proj", "value_proj", "out_proj")),
    # modelled as torchtitan's FSDP under PP (parameters gathered once per step, not measured for MaxText)
    zero3_unsharded_under_pp=True,
    # its pipeline is one lax.scan over m x repeats + pp - 1 iterations, each stage's chunk on one micro-batch,
    # whose backward keeps every iteration's saved activations (jax.checkpoint per iteration, maxtext 0.2.5
    # layers/pipeline.py): every micro-batch in flight, for its GPipe and circular (repeat) schedules alike
    pipeline_memory_schedule="gpipe",
    pp_buffers_per_microbatch=False,  # one jitted step: XLA assigns the pipeline's loop state statically
    pytorch_native_kernels=False,  # XLA fuses the kernels; the TPU ceilings are the profile's own
    cudnn_attention=False,  # XLA / Pallas attention on TPUs
    eager_unless_compiled=False,  # XLA compiles the whole step (no --compile)
    eager_composites=(),  # none runs op by op (above)
    fused_loss_option=False,  # MaxText keeps its own loss, counted by logit_bytes
    fp8_lm_head=True,  # MaxText's FP8 path is not documented here: the LM head keeps the recipe's dtype
    moe_dispatcher="alltoall",  # expert-parallel all-to-all under XLA (MaxText moe.py)
    moe_dispatchers=("alltoall",),  # the MaxText emitter selects no other
    moe_searched_dispatchers=(),  # the MaxText emitter selects no other (moe_dispatchers)
    moe_dispatch_host_sync=False,  # static shapes under XLA: nothing read on the host
    # dropless (sparse_matmul): the token copies sorted into expert order by a row gather and gathered back after the
    # experts (layers/moe.py permute: jnp.repeat + _sort_activations, unpermute), their backward two more gathers
    # (use_custom_sort_vjp, base.yml true); on TPU such gathers run far below HBM bandwidth (moe.row_gather_bw)
    moe_permute="gather",
    # sparse_matmul's shard_map takes its inputs as (batch over data / fsdp / expert, length over tensor_sequence /
    # context, embed whole): the tensor axis replicates them, and each TP rank sorts and gathers all of its batch's
    # copies (maxtext 0.2.5 layers/moe.py get_routed_moe_shardings input_partition_pspec; configs/base.yml
    # logical_axis_rules activation_batch, activation_norm_length)
    moe_permute_tp_replicated=True,
    moe_alltoall_sorts_by_local_expert=False,  # not modelled: the permutation is counted as the row gathers above
    moe_flex_backend="deepep",  # no flex dispatcher (moe_dispatchers above): the default, never priced
    moe_flex_permute="fused",  # no flex dispatcher (moe_dispatchers)
    moe_forced_routing="random_scores",  # no forced gate of its own: top-k over the router's scores (moe.py)
    moe_shared_expert_overlap=(),  # no separate shared-expert stream modelled
    moe_router_fused=True,  # XLA fuses the router's top-k with its score function
    moe_gemm_per_expert=False,  # ragged / grouped matmul (megablox) in one kernel
    # dropless experts run megablox's gmm / tgmm (base.yml megablox and sparse_matmul True) on m-tiles of 512 rows:
    # tile_batch_seq in base.yml at maxtext 9ca35d7 and 3eb77db (the tpu-recipes runs), wi_tile_fwd_batch_seq /
    # wo_tile_fwd_batch_seq in maxtext 0.2.5's (which the emitted config runs; megablox takes the forward tiling for its
    # backward too); the emitter leaves them at that (planner.emit.maxtext)
    moe_grouped_row_tile=512,
    moe_expert_epilogue_eager=False,  # XLA fuses elementwise ops into their neighbours
    yarn_rope_unfused=False,  # its rotary embedding is priced by eager_composites or fused
    moe_a2a_overlap_option=False,  # none
    moe_capacity_einsum=True,  # dense_matmul (emit: sparse_matmul False), moe.py
    # remat_policy "minimal" is save_only_these_names over REMAT_MINIMAL_KEEPS: the attention core re-runs (its
    # residuals carry no name), and for MLA the down-projections (compute.custom_remat_recompute_s)
    selective_recomputes="named_keeps",
    selective_keeps=REMAT_MINIMAL_KEEPS,  # MT:layers/decoders.py minimal_policy (above)
    zero3_gather="block",  # XLA gathers each scanned layer's weights as one collective per layer
    zero3_regather_on_recompute=False,  # modelled as FSDP2: a layer gathered once for recompute and backward
    legacy_zero3_option=False,  # the blocking 2021 ZeRO-3 is DeepSpeed's (DeepSpeed PR #1188)
    zero_is_distributed_optimizer=False,  # shard_optimizer_over_data / the fsdp axis (MT:configs/base.yml)
    rank_order="mesh",  # the hybrid ICI x DCN device mesh (MT:utils/max_utils.py create_device_mesh)
    pp_p2p_scatter_gather=False,  # sends the full activation unless sequence parallelism shards it
    # MaxText's TPU scripts launch with XLA's async collective fusion, overlapping the TP collectives with the
    # matmuls (LIBTPU_INIT_ARGS --xla_tpu_enable_async_collective_fusion=true; MaxText/configs/v5p/512b.sh @5431d43)
    tp_overlap_evidence="xla_tpu",
    searched_zero_stages=(3,),  # weights sharded over the fsdp axis (MT:configs/base.yml ici_fsdp_parallelism)
    hsdp_searched=True,  # fsdp axis within a slice, data axis across (MT:configs/base.yml dcn_data_parallelism)
    zero3_in_domain_searched=False,  # its ZeRO-3 is already among the searched stages (searched_zero_stages)
    pipeline_layout_option=False,  # num_layers_per_pipeline_stage: one count for all stages (emit/maxtext.py)
    # implied by MaxText's stricter rules (MT:configs/types.py:3574-3617: layers split evenly over pp x vpp with no
    # stage sizes, the micro-batch count a multiple of pp for every schedule)
    plan_rules=(
        interleaved_microbatches("MaxText"),
        uneven_stages_split_into_vpp("MaxText", "num_layers_per_pipeline_stage"),
        embedding_loss_units_split("MaxText"),
    ),
)
