// wgsl_reflect's package "main" is a CommonJS build marked as an ES module, which Node cannot
// load; its ES module build has no declarations of its own, so it borrows the package's.
declare module 'wgsl_reflect/wgsl_reflect.module.js' {
  export * from 'wgsl_reflect';
}
