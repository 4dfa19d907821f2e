"""Node-group plugins: the filters and scores of the workspace scheduler
(``kgpu.framework.groups``), which judge one workspace against groups of identical nodes."""
